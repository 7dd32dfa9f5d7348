/** The scenario registry: names are part of the CLI and config surface. */
import { abortRace, ABORT_RACE } from './abort-race.js';
import { capacityAudit, CAPACITY_AUDIT } from './capacity-audit.js';
import { concurrentInterleave, CONCURRENT_INTERLEAVE } from './concurrent-interleave.js';
import type { Scenario } from './context.js';
import { overlimitHandoff, OVERLIMIT_HANDOFF } from './overlimit-handoff.js';
import { overlimitRejection, OVERLIMIT_REJECTION } from './overlimit-rejection.js';
import { prefixChurn, PREFIX_CHURN } from './prefix-churn.js';
import { prefixCollision, PREFIX_COLLISION } from './prefix-collision.js';
import { prefixIsolation, PREFIX_ISOLATION } from './prefix-isolation.js';

export const SCENARIOS: Readonly<Record<string, Scenario>> = {
  [CAPACITY_AUDIT]: capacityAudit,
  [OVERLIMIT_HANDOFF]: overlimitHandoff,
  [OVERLIMIT_REJECTION]: overlimitRejection,
  [ABORT_RACE]: abortRace,
  [CONCURRENT_INTERLEAVE]: concurrentInterleave,
  [PREFIX_ISOLATION]: prefixIsolation,
  [PREFIX_COLLISION]: prefixCollision,
  [PREFIX_CHURN]: prefixChurn,
};

export const SCENARIO_NAMES: readonly string[] = Object.keys(SCENARIOS);
