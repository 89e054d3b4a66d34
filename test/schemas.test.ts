import { readFileSync, readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { renderSchemas } from "../docs/schemas/render.js";

const dir = new URL("../docs/schemas/", import.meta.url);

describe("docs/schemas", () => {
  const rendered = renderSchemas();

  it("covers the wire formats", () => {
    const names = rendered.map(([file]) => file);
    expect(names).toContain("PendingAsk.schema.json");
    expect(names).toContain("AskResolution.schema.json");
    expect(names).toContain("GateDecision.schema.json");
  });

  it.each(rendered)("%s is up to date (run `npm run schemas`)", (file, text) => {
    expect(readFileSync(new URL(file, dir), "utf8")).toBe(text);
  });

  it("holds no schema the package no longer exports", () => {
    const onDisk = readdirSync(dir).filter((f) => f.endsWith(".schema.json"));
    expect(onDisk.sort()).toEqual(rendered.map(([file]) => file).sort());
  });
});
