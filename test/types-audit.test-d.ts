import { describe, expectTypeOf, it } from "vitest";
import { AuditSink, auditObserver, verifyAuditLog } from "loopctl/audit";
import type { AuditAnchor, AuditVerifyResult } from "loopctl/audit";
import { LoopManagers } from "loopctl/engine";
import type { GateDecision, Observer } from "loopctl/engine";

describe("loopctl/audit", () => {
  it("opens a sink asynchronously, never by new", () => {
    expectTypeOf(AuditSink.open).returns.toEqualTypeOf<Promise<AuditSink>>();
    // @ts-expect-error the constructor is private: AuditSink.open takes the lock and resumes the chain
    void new AuditSink();
  });

  it("observes a run through the managers", async () => {
    const sink = await AuditSink.open("audit.jsonl");
    expectTypeOf(auditObserver(sink)).toExtend<Observer>();
    void new LoopManagers().withObserver(auditObserver(sink));
    expectTypeOf(sink.anchor).toEqualTypeOf<AuditAnchor>();
  });

  it("verifies to a result that narrows on ok", async () => {
    const result = await verifyAuditLog("audit.jsonl");
    expectTypeOf(result).toEqualTypeOf<AuditVerifyResult>();
    expectTypeOf(result.records).toEqualTypeOf<readonly GateDecision[]>();
    if (result.ok) {
      expectTypeOf(result.anchor).toEqualTypeOf<AuditAnchor>();
      // @ts-expect-error a log that verified has no problem line
      void result.line;
    } else {
      expectTypeOf(result.line).toBeNumber();
      expectTypeOf(result.message).toBeString();
    }
  });
});
