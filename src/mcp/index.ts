/**
 * `loopctl/mcp`: the tools of an MCP server (a connected
 * `@modelcontextprotocol/sdk` client) as loopctl tools, kept current and
 * pinned to what the server lists, and a ready hook that treats MCP
 * annotations as the untrusted hints they are, and a schema validator for the
 * client that checks a server's results in linear time. Needs
 * `@modelcontextprotocol/sdk@1` for the types; importing this module loads
 * no SDK.
 *
 * @packageDocumentation
 */
export { mcpTools } from "./toolset.js";
export type { McpClient, McpRefreshOptions, McpToolProblem, McpToolset, McpToolsOptions } from "./toolset.js";
export { mcpSchemaValidator } from "./schema-validator.js";
export { mcpAnnotationHook } from "./annotation-hook.js";
export type { McpAnnotationHookOptions } from "./annotation-hook.js";
export { McpCallbackError, McpConfigError, McpServerError, McpToolError } from "./errors.js";
