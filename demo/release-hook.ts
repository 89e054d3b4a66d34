import type { Hook } from "loopctl/engine";
import { ChangelogInput, DeployInput, changelogSection } from "./tools.js";

/**
 * The release policy: reading is safe; writing and deploying need a person.
 * Its prompts show what the person decides on: the exact text the changelog
 * gets, and which version goes to which environment, checks or not. (An ask
 * carries the arguments' digest, not the arguments: the prompt is where a
 * person sees them.)
 */
export const releaseHook: Hook = {
  name: "release-policy",
  preToolUse(call) {
    switch (call.name) {
      case "read_file":
        return { type: "allow" };
      case "write_changelog": {
        const input = ChangelogInput.safeParse(call.input);
        if (!input.success) break;
        const section = changelogSection(input.data).trimEnd().split("\n");
        return {
          type: "ask",
          prompt: [
            `Add this ${input.data.version} section at the top of CHANGELOG.md?`,
            "",
            ...section.map((line) => (line === "" ? "" : `  ${line}`)),
          ].join("\n"),
        };
      }
      case "deploy": {
        const input = DeployInput.safeParse(call.input);
        if (!input.success) break;
        const { env, version, skipChecks } = input.data;
        return {
          type: "ask",
          prompt:
            skipChecks === true
              ? `Deploy ${version} to ${env} WITHOUT the pre-deploy checks?`
              : `Deploy ${version} to ${env}, after the pre-deploy checks?`,
        };
      }
    }
    return { type: "ask", prompt: `Run ${call.name} with ${JSON.stringify(call.input)}?` };
  },
};
