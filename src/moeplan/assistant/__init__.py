"""moeplan inside an assistant: the MCP server (:mod:`moeplan.assistant.mcp_server`, needs the ``mcp`` extra), the
agent skill shipped with the package (``skills/moeplan``) and the CLI commands that serve them (``moeplan mcp``,
``moeplan skill install``: :mod:`moeplan.cli.assistant`).

Nothing here is imported by the engine; the SDK is imported only when the server starts (start-up time)."""
