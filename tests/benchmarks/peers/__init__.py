"""Section 6's peers: each framework's durable call, one interface, own process."""
