import { dirname } from "node:path";

/**
 * The folders a `mkdir(folder, { recursive: true })` that resolved to `first`
 * made: `first` and each folder below it down to `folder`, top first; none
 * when `first` is `undefined` (the folder was there). Each is a new entry in
 * its parent, which must be synced for the folder to survive a power cut.
 */
export function foldersMade(folder: string, first: string | undefined): string[] {
  if (first === undefined) return [];
  const made: string[] = [];
  for (let at = folder; ; at = dirname(at)) {
    made.unshift(at);
    if (at === first || dirname(at) === at) return made;
  }
}
