/**
 * `loopctl/mcp`: the tools of an MCP server (a connected
 * `@modelcontextprotocol/sdk` client) as loopctl tools, kept current and
 * pinned to what the server lists. Needs
 * `@modelcontextprotocol/sdk@1` for the types; importing this module loads
 * no SDK.
 *
 * @packageDocumentation
 */
export { mcpTools } from "./toolset.js";
export type { McpClient, McpToolProblem, McpToolset, McpToolsOptions } from "./toolset.js";
export { McpConfigError, McpServerError, McpToolError } from "./errors.js";
