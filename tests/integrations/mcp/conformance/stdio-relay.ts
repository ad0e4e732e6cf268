/**
 * The reference server (everything-server.ts, vendored unmodified) as a stdio MCP
 * server, so that `agent-gate mcp proxy -- npx tsx stdio-relay.ts` can run it as
 * its stdio child. Ours, not the suite's: the reference server only speaks
 * Streamable HTTP and exports nothing, so this process imports it (it listens on a
 * free loopback port) and relays every JSON-RPC message, unchanged and in order,
 * between its own stdin/stdout and that port through the SDK's own client
 * transport. The server's behaviour (sessions, SSE streams it closes, requests it
 * sends back) is the HTTP server's, seen through one client that never drops,
 * merges or invents a message.
 */
import net from 'node:net';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';

// The vendored server logs with console.log; stdout is the MCP channel here.
console.log = console.error;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

async function listening(port: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!(await accepts(port))) {
    if (Date.now() > deadline) {
      throw new Error(`the reference server did not listen on ${port} within 30 s`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const port = await freePort();
process.env.PORT = String(port);
await import('./everything-server.ts');
await listening(port);

const upstream = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`));
const stdio = new StdioServerTransport();
let sending: Promise<void> = Promise.resolve();
let initializeId: unknown;

stdio.onmessage = (message: JSONRPCMessage) => {
  if ('method' in message && message.method === 'initialize' && 'id' in message) {
    initializeId = message.id;
  }
  // One POST after another, in the order the client wrote them (a POST returns once
  // its response has started, so a long call does not hold the next message back).
  sending = sending.then(() =>
    upstream.send(message).catch((error: unknown) => {
      console.error('stdio-relay: could not deliver a message to the reference server:', error);
      if ('id' in message && 'method' in message) {
        void stdio.send({
          jsonrpc: '2.0',
          id: message.id,
          error: { code: -32603, message: `stdio-relay: ${String(error)}` }
        });
      }
    })
  );
};
upstream.onmessage = (message: JSONRPCMessage) => {
  if ('result' in message && message.id === initializeId) {
    const { protocolVersion } = message.result as { protocolVersion?: unknown };
    if (typeof protocolVersion === 'string') {
      upstream.setProtocolVersion(protocolVersion); // what the SDK's Client does
    }
  }
  void stdio.send(message);
};
upstream.onerror = (error: Error) => console.error('stdio-relay:', error.message);
process.stdin.once('end', () => process.exit(0));
await upstream.start();
await stdio.start();
