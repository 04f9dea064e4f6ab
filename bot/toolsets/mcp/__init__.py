"""Other MCP servers' tools as kelpie tools (the client side of MCP, `mcp.servers`).

`connection` keeps one server connected and its tool list current; `toolset` turns what a
server lists into kelpie tools (reads and writes by kelpie's configuration, never by the
server's hints) that pass the whole pipeline like the built-in ones.
"""
