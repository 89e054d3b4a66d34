/** An object being scanned: the keys seen so far, and whether a key comes next. */
interface ObjectScope {
  readonly type: "object";
  readonly keys: Set<string>;
  expectKey: boolean;
  key: string;
}

interface ArrayScope {
  readonly type: "array";
  index: number;
}

/**
 * The first member that occurs twice in one object of `text`, at any depth:
 * its key and its path (`record.verdict`, `a[2].b`), or `undefined` when every
 * object's keys are distinct. Keys are compared as JSON reads them, so
 * `"verdict"` and `"verd\u0069ct"` are the same key.
 *
 * `text` must be valid JSON (`JSON.parse` accepted it): `JSON.parse` keeps the
 * last of two members silently, and a reader that keeps the first would see
 * another value; this is the check it skips.
 */
export function duplicateMember(text: string): { readonly key: string; readonly path: string } | undefined {
  const scopes: (ObjectScope | ArrayScope)[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const top = scopes[scopes.length - 1];
    if (c === 0x22 /* " */) {
      const start = i;
      let escaped = false;
      for (i++; text.charCodeAt(i) !== 0x22; i++) {
        if (text.charCodeAt(i) === 0x5c /* \ */) {
          escaped = true;
          i++;
        }
      }
      if (top?.type === "object" && top.expectKey) {
        // Only a key with an escape needs decoding; the others are their own text.
        const key = escaped ? (JSON.parse(text.slice(start, i + 1)) as string) : text.slice(start + 1, i);
        top.key = key;
        top.expectKey = false;
        if (top.keys.has(key)) return { key, path: pathOf(scopes) };
        top.keys.add(key);
      }
    } else if (c === 0x7b /* { */) {
      scopes.push({ type: "object", keys: new Set(), expectKey: true, key: "" });
    } else if (c === 0x5b /* [ */) {
      scopes.push({ type: "array", index: 0 });
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      scopes.pop();
    } else if (c === 0x2c /* , */) {
      if (top?.type === "object") top.expectKey = true;
      else if (top?.type === "array") top.index++;
    }
  }
  return undefined;
}

function pathOf(scopes: readonly (ObjectScope | ArrayScope)[]): string {
  let path = "";
  for (const scope of scopes) {
    if (scope.type === "array") path += `[${scope.index}]`;
    else path += path === "" ? scope.key : `.${scope.key}`;
  }
  return path;
}
