"""Formats the gateway shares with the programs it talks to, apart from both sides.

Each subpackage is one peer's wire: what it sends, how it hashes, how it reads a prompt.
Both the router (the core, the transports) and the programs that stand in for the peer
(the emulator) import it, and it imports nothing of the package, so neither side holds
the other's code; each format is checked against vectors transcribed from the peer's own
source (tests/gateway/protocols/)."""
