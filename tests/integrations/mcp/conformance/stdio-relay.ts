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

// Fault injection for the regression test of the race below: the standalone GET stream
// opens this many milliseconds late, as it did on a loaded machine.
const getDelayMs = Number(process.env.STDIO_RELAY_GET_DELAY_MS ?? '0');

// The race this relay must not lose: the server sends what relates to no request of
// the client (the reference server's sampling and elicitation requests, its list
// changes) on the session's standalone GET stream, and one sent while that stream is
// not open yet is only stored for a resume, never delivered: the tool waits for an
// answer that cannot come, and the client's call times out (MCP error -32001, seen
// once in CI through the proxy, where each session starts a fresh relay). The SDK's
// transport opens that stream after `notifications/initialized` is accepted and does
// not wait for it, so the client's first call could reach the server before it. Here
// the message after `notifications/initialized` waits until the GET was answered
// (opened, refused, or failed), as a stdio server, with its one channel, never loses.
let standaloneAnswered: () => void = () => {};

const relayFetch = async (input: string | URL, init?: RequestInit): Promise<Response> => {
  if (init?.method !== 'GET') {
    return fetch(input, init);
  }
  if (getDelayMs > 0) {
    await new Promise((resolve) => setTimeout(resolve, getDelayMs));
  }
  try {
    return await fetch(input, init);
  } finally {
    standaloneAnswered(); // the server holds the stream once its headers are sent
  }
};

/** Until the standalone stream's GET is answered, or `boundMs` passed (never forever). */
function standaloneOpened(boundMs: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, boundMs);
    standaloneAnswered = () => {
      clearTimeout(timer);
      resolve();
    };
  });
}

const upstream = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`), {
  fetch: relayFetch
});
const stdio = new StdioServerTransport();
let sending: Promise<void> = Promise.resolve();
let initializeId: unknown;

stdio.onmessage = (message: JSONRPCMessage) => {
  if ('method' in message && message.method === 'initialize' && 'id' in message) {
    initializeId = message.id;
  }
  // One POST after another, in the order the client wrote them (a POST returns once
  // its response has started, so a long call does not hold the next message back).
  const initialized = 'method' in message && message.method === 'notifications/initialized';
  sending = sending.then(() => {
    const opened = initialized ? standaloneOpened(30_000) : Promise.resolve();
    return upstream.send(message).then(() => opened, (error: unknown) => {
      console.error('stdio-relay: could not deliver a message to the reference server:', error);
      if ('id' in message && 'method' in message) {
        void stdio.send({
          jsonrpc: '2.0',
          id: message.id,
          error: { code: -32603, message: `stdio-relay: ${String(error)}` }
        });
      }
    });
  });
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
