import { lstat, realpath } from "node:fs/promises";
import { resolve } from "node:path";
import {
  AuditAnchorError,
  AuditIoError,
  AuditKeyError,
  auditSealPath,
  parseAuditAnchor,
  readAuditKeyFile,
} from "../audit/index.js";
import type { AuditAnchor } from "../audit/index.js";
import { LoopctlError, shownValue } from "../errors.js";
import { CliUsageError, EXIT, parseCommandArgs } from "./context.js";
import type { CliContext, ExitCode } from "./context.js";
import { verifyAuditLogSealed } from "../audit/verify.js";
import { json, printable } from "./format.js";
import { errorDocument } from "./failure.js";
import { unexpandedTilde } from "./grant-source.js";
import { printHelp } from "./help.js";

/**
 * The key in a key file option (`given`, as typed; `flag` and `command` name
 * it in refusals); a file that cannot serve as one is a usage error.
 */
export async function keyOption(
  given: string,
  cwd: string,
  flag = "--key-file",
  command = "audit verify",
): Promise<Uint8Array> {
  const file = resolve(cwd, given);
  try {
    return await readAuditKeyFile(file);
  } catch (error) {
    if (error instanceof AuditKeyError) throw new CliUsageError(command, `${flag}: ${error.message}`);
    if (error instanceof AuditIoError && (error.cause as NodeJS.ErrnoException | undefined)?.code === "ENOENT") {
      // A file under a folder named ~ here: the shell expands ~ in --key-file ~/k, not in --key-file=~/k.
      const tilde = given.startsWith("~") ? `; ${unexpandedTilde(flag)}` : "";
      throw new CliUsageError(command, `${flag}: ${file}: no such file${tilde}`);
    }
    throw error;
  }
}

/** `loopctl audit verify FILE [--anchor SEQ:HASH] [--key-file F] [--json]`. */
export async function auditVerify(args: readonly string[], context: CliContext): Promise<ExitCode> {
  const { values, positionals } = parseCommandArgs("audit verify", args, {
    anchor: { type: "string" },
    "key-file": { type: "string" },
    json: { type: "boolean", default: false },
    help: { type: "boolean", short: "h", default: false },
  });
  if (values.help) return printHelp("audit verify", context, values.json);
  if (positionals.length === 0) throw new CliUsageError("audit verify", "missing the FILE to verify");
  if (positionals.length > 1) {
    throw new CliUsageError("audit verify", `unexpected argument ${shownValue(positionals[1])}`);
  }
  // An empty path ("$UNSET") resolves to the current folder: said as what it is, not as a folder.
  if (positionals[0] === "") throw new CliUsageError("audit verify", "FILE is empty: name the audit log to verify");
  if (values["key-file"] === "") throw new CliUsageError("audit verify", "--key-file needs the FILE of a key");
  let anchor: AuditAnchor | undefined;
  if (values.anchor !== undefined) {
    try {
      anchor = parseAuditAnchor(values.anchor);
    } catch (error) {
      if (error instanceof AuditAnchorError) throw new CliUsageError("audit verify", `--anchor: ${error.message}`);
      throw error;
    }
  }
  const keyFile = values["key-file"];
  const file = resolve(context.cwd, positionals[0] as string);
  let key: Uint8Array | undefined;
  let checked;
  try {
    // A missing key file is a usage error; one that cannot be read is reported as the log would be.
    key = keyFile === undefined ? undefined : await keyOption(keyFile, context.cwd);
    // Only the count of records is printed: none are kept, so that a log of any length verifies.
    // With a key, the line the seal verification checked vouches for: a seal behind the log's end leaves the lines
    // after it on their MACs alone (a writer stopped before its next seal, or an older seal put back), said as such.
    checked = await verifyAuditLogSealed(file, {
      records: false,
      ...(anchor ? { anchor } : {}),
      ...(key ? { key } : {}),
      ...(context.signal ? { signal: context.signal } : {}),
    });
  } catch (error) {
    if (error instanceof AuditIoError && (error.cause as NodeJS.ErrnoException | undefined)?.code === "ENOENT") {
      if (values.json) {
        context.stdout.write(json({ ok: false, file, problem: "missing", message: "no such file" }));
      } else {
        context.stderr.write(`loopctl audit verify: ${printable(file)}: no such file\n`);
      }
      return EXIT.failed;
    }
    // With --json, a log (or key file) that cannot be read is reported on stdout
    // too, so a script always has a document to parse; the exit code stays that of I/O.
    // So is any other failure but a usage error (said as one), stderr and exit code then as without --json.
    if (values.json && !(error instanceof CliUsageError)) {
      context.stdout.write(json({ ok: false, file, ...errorDocument(error, context.signal) }));
      if (error instanceof LoopctlError && !context.signal?.aborted) return EXIT.io;
    }
    throw error;
  }
  const { result, sealed } = checked;
  // The lines verified: every line of a log that verifies, those before the line named of one that does not.
  const verified = result.ok ? result.anchor.seq : result.line - 1;
  // A seal beside lines that carry no MAC: a keyed writer left it, and the lines may have been written again
  // without the key (MACs stripped, hashed anew), which only the key can tell. Said, not judged: it may be stale.
  // Beside the file a symbolic link leads to, as verification reads a key's seal and its writer leaves it.
  const sealBeside =
    result.ok && key === undefined && (await exists(auditSealPath(await realpath(file).catch(() => file))));
  const behind = sealed !== undefined && result.ok && sealed < result.anchor.seq;
  if (values.json) {
    context.stdout.write(
      json(
        result.ok
          ? {
              ok: true,
              file,
              records: verified,
              anchor: result.anchor,
              keyed: result.keyed,
              // As the text says: an empty log leaves the key nothing to check.
              authenticated: key !== undefined && result.anchor.seq > 0,
              sealBeside,
              ...(sealed === undefined ? {} : { sealed }),
            }
          : {
              ok: false,
              file,
              line: result.line,
              problem: result.problem,
              message: result.message,
              verifiedRecords: verified,
            },
      ),
    );
    return result.ok ? EXIT.ok : EXIT.failed;
  }
  if (result.ok) {
    const { seq, hash } = result.anchor;
    const count = `${verified} record${verified === 1 ? "" : "s"}`;
    // An empty log may have no seal yet (a keyed writer seals it as it starts it): the key checked nothing.
    const checked =
      key !== undefined
        ? seq === 0
          ? " (no line yet: nothing for the key to check)"
          : behind
            ? `, every line's mac verified with the key; the seal vouches for line ${sealed} only: ` +
              `lines ${sealed + 1}${sealed + 1 === seq ? "" : `-${seq}`} rest on their MACs alone (a writer stopped ` +
              "between its lines and its seal, wrote them after the seal was read, or an older seal was put back), " +
              `and lines cut off after line ${sealed} would not be told`
            : ", every line's mac and the seal verified with the key"
        : result.keyed
          ? " (its lines carry MACs: pass --key-file to check them and the seal)"
          : sealBeside
            ? " (a seal lies beside it, as a keyed writer leaves one, though no line carries a MAC: pass --key-file to check the log against it)"
            : "";
    context.stdout.write(`ok: ${printable(file)}: ${count}, chain intact${checked}\nanchor: ${seq}:${hash}\n`);
    return EXIT.ok;
  }
  context.stderr.write(
    `loopctl audit verify: ${printable(file)}: FAILED at line ${result.line} (${result.problem}): ${printable(result.message)}\n` +
      `the ${verified} line${verified === 1 ? "" : "s"} before it verified\n`,
  );
  return EXIT.failed;
}

/** Whether anything is at `path` (a link included), as far as this process can tell. */
async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
}
