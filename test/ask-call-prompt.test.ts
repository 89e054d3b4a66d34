import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { InvalidCallPromptOptionsError, REDACTED, callPrompt, quoteForPrompt, redactSecretKeys } from "loopctl/ask";
import { thrownBy } from "./support/thrown.js";

describe("callPrompt", () => {
  it("names the tool and its title, and shows the arguments as indented JSON", () => {
    expect(callPrompt({ name: "write_file", title: "Write File" }, { path: "notes/a.txt", lines: [1, 2] })).toBe(
      [
        'Allow the tool "write_file" ("Write File") to run?',
        "Arguments:",
        "{",
        '  "path": "notes/a.txt",',
        '  "lines": [',
        "    1,",
        "    2",
        "  ]",
        "}",
      ].join("\n"),
    );
  });

  it("leaves out a title equal to the name, and puts notes between the question and the arguments", () => {
    expect(callPrompt({ name: "x", title: "x" }, {}, { notes: ["hint one", "hint two"] })).toBe(
      'Allow the tool "x" to run?\nhint one\nhint two\nArguments:\n{}',
    );
  });

  it("redacts values under secret-looking keys by default, at any depth, and only in the prompt", () => {
    const input = Object.freeze({
      url: "https://x",
      headers: { Authorization: "Bearer abc", cookie: "sid=1" },
      apiKey: "k-123",
      items: [{ password: "hunter2" }],
    });
    const prompt = callPrompt({ name: "fetch" }, input);
    for (const secret of ["Bearer abc", "sid=1", "k-123", "hunter2"]) expect(prompt).not.toContain(secret);
    expect(prompt).toContain(`"apiKey": "${REDACTED}"`);
    expect(prompt).toContain('"url": "https://x"');
    expect(input.apiKey).toBe("k-123");
  });

  it("shows an argument under the key __proto__ (as JSON.parse makes one), with its secrets redacted: nothing the call runs with is hidden", () => {
    // A tool that copies its input with Object.assign would read `force` through the prototype.
    const input: unknown = JSON.parse('{"path":"a.txt","__proto__":{"force":true,"token":"t-1"}}');
    const prompt = callPrompt({ name: "write" }, input);
    expect(prompt).toBe(
      [
        'Allow the tool "write" to run?',
        "Arguments:",
        "{",
        '  "path": "a.txt",',
        '  "__proto__": {',
        '    "force": true,',
        `    "token": "${REDACTED}"`,
        "  }",
        "}",
      ].join("\n"),
    );
    expect(callPrompt({ name: "write" }, input, { redact: false })).toContain('"token": "t-1"');
  });

  it("takes a redactor of its own (with the path), or none at all", () => {
    const redact = (path: readonly (string | number)[], value: unknown): unknown =>
      path.join(".") === "body.card" ? "**** 4242" : redactSecretKeys(path, value);
    const prompt = callPrompt({ name: "pay" }, { body: { card: "4111111111114242", token: "t" } }, { redact });
    expect(prompt).toContain('"card": "**** 4242"');
    expect(prompt).toContain(`"token": "${REDACTED}"`);
    expect(callPrompt({ name: "pay" }, { token: "t" }, { redact: false })).toContain('"token": "t"');
  });

  it("cuts long arguments at maxArgsChars and says how much is left out", () => {
    const prompt = callPrompt({ name: "write" }, { content: "a".repeat(5000) }, { maxArgsChars: 100 });
    const args = prompt.split("Arguments:\n")[1]!;
    const [shown, rest] = args.split("\n… ");
    expect(shown).toHaveLength(100);
    expect(rest).toBe(
      `${JSON.stringify({ content: "a".repeat(5000) }, null, 2).length - 100} more characters not shown`,
    );
  });

  /** Indented JSON given as [indent, text] per line: its first `max` characters and its whole length. */
  function render(lines: Iterable<readonly [number, string]>, max: number): { shown: string; length: number } {
    let shown = "";
    let length = -1;
    for (const [indent, text] of lines) {
      if (shown.length < max) shown += `${length === -1 ? "" : "\n"}${" ".repeat(indent)}${text}`;
      length += 1 + indent + text.length;
    }
    return { shown: shown.slice(0, max), length };
  }

  it("cuts arguments nested ~1000 deep around 400k values (hundreds of millions of characters indented), saying exactly how many are left out", () => {
    // {"a": {"a": … [0, 0, …] … }}, one line at a time.
    function* lines(depth: number, count: number): Generator<readonly [number, string]> {
      yield [0, "{"];
      for (let level = 1; level < depth; level++) yield [2 * level, '"a": {'];
      yield [2 * depth, '"a": ['];
      for (let i = 0; i < count; i++) yield [2 * depth + 2, i < count - 1 ? "0," : "0"];
      yield [2 * depth, "]"];
      for (let level = depth - 1; level >= 0; level--) yield [2 * level, "}"];
    }
    const nest = (depth: number, count: number): unknown => {
      let value: unknown = new Array<number>(count).fill(0);
      for (let level = 0; level < depth; level++) value = { a: value };
      return value;
    };
    const small = render(lines(3, 2), Number.MAX_SAFE_INTEGER);
    expect(small.shown).toBe(JSON.stringify(nest(3, 2), null, 2));
    expect(small.length).toBe(small.shown.length);

    const { shown, length } = render(lines(990, 400_000), 2000);
    expect(length).toBeGreaterThan(700_000_000);
    const input = nest(990, 400_000);
    expect(JSON.stringify(input).length).toBeLessThan(1_000_000);
    expect(callPrompt({ name: "t" }, input)).toBe(
      `Allow the tool "t" to run?\nArguments:\n${shown}\n… ${length - 2000} more characters not shown`,
    );
  }, 60_000);

  it("renders arguments nested 20,000 deep (deeper than JSON.stringify walks), secrets redacted at the bottom", () => {
    // [[[ … {"token": …} … ]]], one line at a time.
    function* lines(depth: number, token: string): Generator<readonly [number, string]> {
      for (let level = 0; level < depth; level++) yield [2 * level, "["];
      yield [2 * depth, "{"];
      yield [2 * depth + 2, `"token": ${JSON.stringify(token)}`];
      yield [2 * depth, "}"];
      for (let level = depth - 1; level >= 0; level--) yield [2 * level, "]"];
    }
    const depth = 20_000;
    let input: unknown = { token: "t-1" };
    for (let level = 0; level < depth; level++) input = [input];
    for (const [redact, token] of [
      [undefined, REDACTED],
      [false, "t-1"],
    ] as const) {
      const { shown, length } = render(lines(depth, token), 50);
      expect(callPrompt({ name: "t" }, input, { maxArgsChars: 50, ...(redact === undefined ? {} : { redact }) })).toBe(
        `Allow the tool "t" to run?\nArguments:\n${shown}\n… ${length - 50} more characters not shown`,
      );
    }
  }, 60_000);

  it("refuses arguments that refer back to themselves with a TypeError naming where, redacted or not", () => {
    const input: { items: unknown[] } = { items: [] };
    input.items.push({ parent: input });
    for (const redact of [undefined, false] as const) {
      expect(() => callPrompt({ name: "t" }, input, redact === undefined ? {} : { redact })).toThrow(
        new TypeError('callPrompt: the arguments refer back to themselves at $["items"][0]["parent"]'),
      );
    }
  });

  it("never cuts inside a surrogate pair", () => {
    const prompt = callPrompt({ name: "t" }, "😀😀😀", { maxArgsChars: 3 });
    expect(prompt.split("Arguments:\n")[1]!.startsWith('"😀\n…')).toBe(true);
  });

  it("escapes bidi controls and invisible characters, in the arguments and in the tool's name and title", () => {
    const prompt = callPrompt(
      { name: "rm\u202e", title: "safe\u200b" },
      { path: "/tmp/\u202egnp.exe", note: "a\u2028b" },
    );
    expect(prompt).not.toMatch(/[\u200b\u2028\u202e]/);
    expect(prompt).toContain("\\u202e");
    expect(prompt).toContain("\\u200b");
    expect(prompt).toContain("\\u2028");
  });

  it("escapes every other hidden character too: C1 controls, tag characters, variation selectors, format characters", () => {
    // U+0085 and U+009B are C1 controls (U+009B starts a terminal escape sequence); U+E0041.. are tag
    // characters, which spell a message nobody sees; U+FE0F and U+034F are default-ignorable; U+FFF9
    // and U+1D173 are format characters.
    const hidden = "\u007f\u0085\u009b\u034f\ufe0f\ufff9\u{1d173}\u{e0041}\u{e0042}";
    const prompt = callPrompt({ name: `run${hidden}`, title: `safe${hidden}` }, { [`k${hidden}`]: `v${hidden}` });
    expect(prompt).not.toMatch(/(?!\n)[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}]/u);
    // Each shown as JSON escapes (a surrogate pair beyond the BMP), so the arguments still parse to what runs.
    const args = prompt.split("Arguments:\n")[1]!;
    expect(JSON.parse(args)).toEqual({ [`k${hidden}`]: `v${hidden}` });
    expect(prompt).toContain("\\u009b");
    expect(prompt).toContain("\\udb40\\udc41");
    expect(quoteForPrompt(`x${hidden}`)).toBe(
      '"x\\u007f\\u0085\\u009b\\u034f\\ufe0f\\ufff9\\ud834\\udd73\\udb40\\udc41\\udb40\\udc42"',
    );
  });

  it("escapes spaces other than U+0020, private-use and unassigned code points in the arguments, as in the tool's name", () => {
    // A no-break, em or ideographic space reads as a plain space; a private-use or unassigned code
    // point shows as a blank, a box or a glyph a font made up (U+F8FF is a logo on some systems).
    const hidden = "\u00a0\u2003\u3000\ue000\uf8ff\u{f0000}\u0378";
    const input = { command: `rm${hidden}-rf`, [`k${hidden}`]: [`v${hidden}`] };
    const prompt = callPrompt({ name: `run${hidden}` }, input, { redact: false });
    expect(prompt).not.toMatch(/(?![ \n])[\p{Z}\p{Co}\p{Cn}]/u);
    const args = prompt.split("Arguments:\n")[1]!;
    expect(args).toContain('"rm\\u00a0\\u2003\\u3000\\ue000\\uf8ff\\udb80\\udc00\\u0378-rf"');
    // Still JSON that parses to exactly what runs.
    expect(JSON.parse(args)).toEqual(input);
    expect(prompt.split("\n")[0]).toBe(`Allow the tool ${quoteForPrompt(`run${hidden}`)} to run?`);
  });

  it("bounds a name or title from a server", () => {
    expect(quoteForPrompt("x".repeat(500))).toBe(JSON.stringify(`${"x".repeat(200)}…`));
  });

  it("refuses a maxArgsChars that is not a positive integer with InvalidCallPromptOptionsError naming it", () => {
    for (const [maxArgsChars, shown] of [
      [0, "0"],
      [1.5, "1.5"],
      [Number.NaN, "NaN"],
      ["80", "string"],
      [Symbol("80"), "symbol"],
    ] as const) {
      let error: unknown;
      try {
        callPrompt({ name: "t" }, {}, { maxArgsChars: maxArgsChars as number });
      } catch (thrown) {
        error = thrown;
      }
      expect(error).toBeInstanceOf(InvalidCallPromptOptionsError);
      expect(error).toMatchObject({
        code: "ASK_PROMPT_OPTIONS_INVALID",
        argument: "options.maxArgsChars",
        message: `callPrompt: options.maxArgsChars must be a positive integer, got ${shown}`,
      });
    }
  });

  it("refuses a redact that is not a function or false, and notes that are not an array of strings, with InvalidCallPromptOptionsError naming them", () => {
    for (const [options, argument, message] of [
      [{ redact: true }, "options.redact", "callPrompt: options.redact must be a function or false"],
      [{ redact: "keys" }, "options.redact", "callPrompt: options.redact must be a function or false"],
      [{ notes: "check the path" }, "options.notes", "callPrompt: options.notes must be an array of strings"],
      [{ notes: ["ok", 5] }, "options.notes", "callPrompt: options.notes must be an array of strings"],
    ] as const) {
      const error = thrownBy(() => callPrompt({ name: "t" }, { a: 1 }, options as never));
      expect(error).toBeInstanceOf(InvalidCallPromptOptionsError);
      expect(error).toMatchObject({ code: "ASK_PROMPT_OPTIONS_INVALID", argument, message });
    }
  });

  it("refuses an unknown option, naming it, instead of showing what a misspelt redact was meant to hide", () => {
    const hideSsn = (path: readonly (string | number)[], value: unknown): unknown =>
      path.at(-1) === "ssn" ? REDACTED : value;
    for (const [options, message] of [
      [{ redcat: hideSsn }, "callPrompt: options holds an unknown option 'redcat' (did you mean redact?)"],
      [{ maxArgChars: 80 }, "callPrompt: options holds an unknown option 'maxArgChars' (did you mean maxArgsChars?)"],
      [{ note: ["x"] }, "callPrompt: options holds an unknown option 'note' (did you mean notes?)"],
      [
        { redact: hideSsn, colour: true },
        "callPrompt: options holds an unknown option 'colour' (the options are redact, maxArgsChars and notes)",
      ],
    ] as const) {
      let error: unknown;
      try {
        callPrompt({ name: "t" }, { ssn: "078-05-1120" }, options as never);
      } catch (thrown) {
        error = thrown;
      }
      expect(error).toBeInstanceOf(InvalidCallPromptOptionsError);
      expect(error).toMatchObject({ code: "ASK_PROMPT_OPTIONS_INVALID", argument: "options", message });
    }
    expect(callPrompt({ name: "t" }, { ssn: "078-05-1120" }, { redact: hideSsn })).not.toContain("078-05-1120");
  });

  it("refuses options that are not an object, or an AbortSignal given in their place", () => {
    for (const [options, message] of [
      [null, "callPrompt: options must be an object { redact?, maxArgsChars?, notes? }, got null"],
      ["[redacted]", "callPrompt: options must be an object { redact?, maxArgsChars?, notes? }, got a string"],
      [80, "callPrompt: options must be an object { redact?, maxArgsChars?, notes? }, got 80"],
      [() => undefined, "callPrompt: options must be an object { redact?, maxArgsChars?, notes? }, got a function"],
      [
        new AbortController().signal,
        "callPrompt: options must be an object { redact?, maxArgsChars?, notes? }, got an AbortSignal",
      ],
      // Read as options, an array would show the arguments with the default redactor, whatever it holds.
      [[{ redact: false }], "callPrompt: options must be an object { redact?, maxArgsChars?, notes? }, got an array"],
      [
        new Proxy(
          {},
          {
            ownKeys: () => {
              throw new Error("no keys here");
            },
          },
        ),
        "callPrompt: options cannot be read: no keys here",
      ],
    ] as const) {
      const error = thrownBy(() => callPrompt({ name: "t" }, { a: 1 }, options as never));
      expect(error).toBeInstanceOf(InvalidCallPromptOptionsError);
      expect(error).toMatchObject({ code: "ASK_PROMPT_OPTIONS_INVALID", argument: "options", message });
    }
    expect(callPrompt({ name: "t" }, { a: 1 }, undefined)).toContain('"a": 1');
  });

  it("for any JSON arguments and cap: exactly the indented JSON, secrets redacted, cut at the cap with the rest counted", () => {
    const secrets = (key: string, value: unknown): unknown =>
      key !== "" && redactSecretKeys([key], value) === REDACTED ? REDACTED : value;
    fc.assert(
      // Printable ASCII: nothing to escape as invisible, no surrogate pair to keep whole.
      fc.property(fc.jsonValue({ stringUnit: "grapheme-ascii" }), fc.integer({ min: 1, max: 600 }), (value, max) => {
        const whole = JSON.stringify(value, secrets, 2);
        const kept = whole.slice(0, max);
        const args = whole.length > max ? `${kept}\n… ${whole.length - max} more characters not shown` : whole;
        expect(callPrompt({ name: "tool" }, value, { maxArgsChars: max })).toBe(
          `Allow the tool "tool" to run?\nArguments:\n${args}`,
        );
      }),
    );
  });

  it("for any JSON arguments: no secret value shown, nothing invisible, and never longer than the cap allows", () => {
    const secret = fc.string({ minLength: 8 }).map((s) => `S3CR3T-${s}`);
    fc.assert(
      fc.property(fc.jsonValue(), secret, fc.integer({ min: 1, max: 400 }), (value, token, max) => {
        const input = { value, nested: { token } };
        const prompt = callPrompt({ name: "tool" }, input, { maxArgsChars: max });
        expect(prompt).not.toContain("S3CR3T-");
        expect(prompt).not.toMatch(/[\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]/);
        const args = prompt.split("Arguments:\n")[1]!.split("\n… ")[0]!;
        expect(args.length).toBeLessThanOrEqual(max);
      }),
    );
  });
});
