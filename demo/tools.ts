import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import { z } from "zod";
import { defineTool } from "loopctl/engine";
import type { Tool } from "loopctl/engine";
import { readText } from "./workspace.js";
import type { Workspace } from "./workspace.js";

/** What `write_changelog` takes. */
export const ChangelogInput = z.object({ version: z.string().min(1), entries: z.array(z.string()).min(1) });

/** What `deploy` takes. */
export const DeployInput = z.object({
  env: z.enum(["staging", "production"]),
  version: z.string().min(1),
  skipChecks: z.boolean().optional(),
});

/** The Markdown section `write_changelog` puts at the top of CHANGELOG.md. */
export function changelogSection({ version, entries }: z.infer<typeof ChangelogInput>): string {
  return [`## ${version}`, "", ...entries.map((e) => `- ${e}`), "", ""].join("\n");
}

/**
 * The release assistant's tools. They act on the scratch workspace only; the
 * deploy is simulated in-process by writing a marker file, never by running a
 * command.
 */
export function releaseTools(workspace: Workspace): Tool[] {
  const readFileTool = defineTool({
    name: "read_file",
    description: "Read a UTF-8 text file from the release workspace.",
    input: z.object({ path: z.string().min(1) }),
    execute: async ({ path }) => readText(workspace, path),
  });

  const writeChangelog = defineTool({
    name: "write_changelog",
    description: "Add a release section at the top of CHANGELOG.md.",
    input: ChangelogInput,
    execute: async ({ version, entries }) => {
      const path = workspace.inside("CHANGELOG.md");
      const before = await readFile(path, "utf8").catch(() => "");
      await writeFile(path, changelogSection({ version, entries }) + before);
      return `wrote CHANGELOG.md: ${entries.length} entries under ${version}`;
    },
  });

  const deploy = defineTool({
    name: "deploy",
    description: "Deploy a version of the site to an environment.",
    input: DeployInput,
    execute: async ({ env, version, skipChecks }) => {
      const marker = workspace.inside(`deploys/${env}.json`);
      await mkdir(dirname(marker), { recursive: true });
      await writeFile(marker, `${JSON.stringify({ env, version, skipChecks: skipChecks ?? false })}\n`);
      return `deployed ${version} to ${env} (marker deploys/${env}.json)`;
    },
  });

  return [readFileTool, writeChangelog, deploy];
}
