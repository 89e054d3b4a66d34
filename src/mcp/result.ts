import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";

type Block = CallToolResult["content"][number];

/** Bytes held by a base64 string (without decoding it). */
function base64Bytes(data: string): number {
  const padding = data.endsWith("==") ? 2 : data.endsWith("=") ? 1 : 0;
  return Math.max(0, Math.floor((data.length * 3) / 4) - padding);
}

function blockText(block: Block): string {
  switch (block.type) {
    case "text":
      return block.text;
    case "image":
    case "audio":
      return `[${block.type} ${block.mimeType}, ${base64Bytes(block.data)} bytes]`;
    case "resource_link":
      return `[resource link ${block.uri}${block.name === "" ? "" : ` (${block.name})`}]`;
    case "resource": {
      const { resource } = block;
      if ("text" in resource && typeof resource.text === "string") return resource.text;
      return `[resource ${resource.uri}${resource.mimeType === undefined ? "" : `, ${resource.mimeType}`}]`;
    }
    default:
      return `[${String((block as { type?: unknown }).type)} content]`;
  }
}

/**
 * What the model reads of a tool's result: its content blocks as text (text
 * as is, embedded text resources by their text, other media as a short
 * description), one per line; the structured content as JSON when there are
 * no blocks; an old-protocol `toolResult` as JSON.
 */
export function resultText(result: CallToolResult | { readonly toolResult: unknown }): string {
  if (!("content" in result) || !Array.isArray(result.content))
    return JSON.stringify((result as { toolResult?: unknown }).toolResult ?? null);
  if (result.content.length === 0 && result.structuredContent !== undefined)
    return JSON.stringify(result.structuredContent);
  return result.content.map(blockText).join("\n");
}
