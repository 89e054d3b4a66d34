/**
 * Why `resolver`, given where an ask resolver goes, is the other half of a
 * pair: an approver (it has `next()` and `ended()`), whose `resolve(id,
 * answer)` would take every ask for an invalid answer, so each call would be
 * denied with nobody asked. Undefined when it is no approver.
 */
export function approverGivenAsResolver(resolver: object): string | undefined {
  const inbox = resolver as { next?: unknown; ended?: unknown };
  if (typeof inbox.next !== "function" || typeof inbox.ended !== "function") return undefined;
  return (
    "got an approver (it has next() and ended()), the half that answers asks: pass the resolver half here " +
    "(the channel, the first of ApprovalChannel.pair(); a queue's resolver, not its approver()) and give " +
    "the approver to your UI"
  );
}
