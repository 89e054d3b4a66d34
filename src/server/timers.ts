/**
 * The longest delay Node's timers take. A longer one runs after 1 ms (with a
 * TimeoutOverflowWarning), so a "practically forever" option would become a
 * busy loop or an immediate timeout.
 */
export const MAX_TIMER_MS = 2_147_483_647;
