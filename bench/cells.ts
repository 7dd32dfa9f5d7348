/**
 * What the benchmark measures, as data: engine configurations (a preset plus faults and defenses) for the
 * detection matrix, the load sweep, and the false-positive targets.
 *
 * The fault and defense cells are generated from the engine's own lists (FAULTS, DEFENSES), so a fault
 * the engine gains joins the matrix without an edit here; the scenarios come from the prober's registry
 * (SCENARIO_NAMES) the same way. What this file adds is knowledge the engine does not export: which preset a
 * fault is added to, which scenarios are aimed at it, and which defenses address it.
 *
 * The default run must fit in 15 minutes on two cores, so it measures the presets against every scenario,
 * each fault against the scenarios aimed at it, and the defenses of the faults whose aimed scenarios are
 * cheap (a defense's question is whether it silences what catches the fault); --full runs every scenario
 * on every cell and adds the race faults' defenses and more cells. A cell the running engine build cannot provide (unknown preset, a fault or defense it does not
 * know, or does not confirm in GET /debug/config) is reported as unavailable with the reason, not dropped.
 */
import { DEFENSES } from '../engine-under-test/src/defenses.js';
import { FAULTS, PREFIX_CACHE_FAULTS } from '../engine-under-test/src/faults.js';

export type FreeListPolicy = 'fifo' | 'lifo';

export interface EngineCell {
  /** Stable id, used by --cell and in report.json. */
  id: string;
  preset: string;
  faults: readonly string[];
  defenses: readonly string[];
  /** @default the preset's (fifo) */
  freeList?: FreeListPolicy;
  /** What the cell is there to show. */
  role: 'positive' | 'negative' | 'defense';
  why: string;
  /** Scenarios aimed at the cell's fault: all the default run measures here (undefined: every scenario). */
  aimed?: readonly string[];
}

export function cellId(preset: string, faults: readonly string[], defenses: readonly string[], freeList?: FreeListPolicy): string {
  return [preset, ...faults, ...defenses].join('+') + (freeList === undefined ? '' : `/${freeList}`);
}

function cell(
  preset: string,
  faults: readonly string[],
  defenses: readonly string[],
  role: EngineCell['role'],
  why: string,
  opts: { freeList?: FreeListPolicy; aimed?: readonly string[] | undefined } = {},
): EngineCell {
  return {
    id: cellId(preset, faults, defenses, opts.freeList),
    preset,
    faults: [...faults],
    defenses: [...defenses],
    ...(opts.freeList !== undefined ? { freeList: opts.freeList } : {}),
    role,
    why,
    ...(opts.aimed !== undefined ? { aimed: [...opts.aimed] } : {}),
  };
}

/** The incident's fault lives in its own preset; every other fault is added to a base without faults. */
const INCIDENT_FAULT = 'admission-checks-finished';

/** The preset a fault is added to: single node for the prefix cache's faults, the disaggregated base otherwise. */
export function baseFor(fault: string): string {
  return (PREFIX_CACHE_FAULTS as readonly string[]).includes(fault) ? 'single' : 'disaggregated';
}

/** Where each fault shows. A fault not listed gets every scenario. */
const AIMED: Readonly<Record<string, readonly string[]>> = {
  'admission-checks-finished': ['overlimit-handoff'],
  'late-write': ['abort-race'],
  'offload-release-race': ['abort-race'],
  'prefix-cache-ignores-salt': ['prefix-isolation'],
  'weak-prefix-hash': ['prefix-collision'],
  'prompt-cache-restore-race': ['prefix-churn'],
};

/**
 * The free list a fault's cells use: late writes land in pages the next owner got right away, which an idle
 * FIFO pool rarely hands out soon; the default (fifo) cell runs beside it and shows exactly that.
 */
const FREE_LIST: Readonly<Record<string, FreeListPolicy>> = { 'late-write': 'lifo' };

/** The defenses measured alone on top of each fault (every disaggregated one for the incident, as in the engine's README table). */
const ADDRESSES: Readonly<Record<string, readonly string[]>> = {
  'admission-checks-finished': ['reject-before-bootstrap', 'deferred-release', 'page-tags', 'zero-on-release', 'transfer-integrity'],
  'late-write': ['deferred-release', 'transfer-integrity'],
  'offload-release-race': ['deferred-release', 'transfer-integrity'],
  'prefix-cache-ignores-salt': ['salted-prefix-cache'],
  'weak-prefix-hash': ['strong-prefix-hash'],
  'prompt-cache-restore-race': ['restore-fencing'],
};

/**
 * The defenses the default run measures per fault (the rest of ADDRESSES runs with --full). The race
 * faults' defenses need abort-race, which runs alone (EXCLUSIVE_SCENARIOS) at about a second a cycle: they
 * do not fit in the default run's 15 minutes.
 */
const ADDRESSES_DEFAULT: Readonly<Record<string, readonly string[]>> = {
  'admission-checks-finished': ADDRESSES['admission-checks-finished']!,
  'prefix-cache-ignores-salt': ADDRESSES['prefix-cache-ignores-salt']!,
  'weak-prefix-hash': ADDRESSES['weak-prefix-hash']!,
  'prompt-cache-restore-race': ADDRESSES['prompt-cache-restore-race']!,
};

/** More defenses per fault for --full. */
const ADDRESSES_FULL: Readonly<Record<string, readonly string[]>> = {
  'late-write': ['page-tags'],
  'offload-release-race': ['page-tags'],
  'prompt-cache-restore-race': ['page-tags'],
};

/**
 * Scenarios whose detection depends on millisecond timing (abort-race aborts planters 3 to 120 ms in and
 * races readers for the freed pages): their series run one at a time with nothing else of ours in flight.
 * With four series sharing the process, the same late-write and offload cells caught 1 and 0 cycles in 10
 * where alone they caught 6 and 9.
 */
export const EXCLUSIVE_SCENARIOS: readonly string[] = ['abort-race'];

const WHY: Readonly<Record<string, string>> = {
  'late-write': 'abort frees decode pages while transfer batches still land',
  'offload-release-race': 'host-offload copies not fenced against page release',
  'prefix-cache-ignores-salt': 'the prefix cache ignores cache_salt: tenants share cached pages',
  'weak-prefix-hash': 'a weak prefix-block hash: a permuted block hits another prompt’s KV',
  'prompt-cache-restore-race': 'a prefix-cache entry survives its page being handed to another request',
};

const known = (names: readonly string[], list: readonly string[]): string[] => names.filter((n) => list.includes(n));

function faultCells(full: boolean): EngineCell[] {
  const out: EngineCell[] = [];
  for (const fault of FAULTS as readonly string[]) {
    const incident = fault === INCIDENT_FAULT;
    const preset = incident ? 'incident' : baseFor(fault);
    const faults = incident ? [] : [fault];
    const aimed = AIMED[fault];
    const freeList = FREE_LIST[fault];
    const opts = { aimed, ...(freeList !== undefined ? { freeList } : {}) };
    if (!incident) out.push(cell(preset, faults, [], 'positive', `${WHY[fault] ?? fault}${freeList !== undefined ? ` (${freeList} free list)` : ''}`, opts));
    // The default free list (fifo) too, so the report says what a lifo-only cell would hide.
    if (!incident && freeList !== undefined) out.push(cell(preset, faults, [], 'positive', `${WHY[fault] ?? fault} (fifo free list, idle pool)`, { aimed }));
    const defenses = known(full ? [...(ADDRESSES[fault] ?? []), ...(ADDRESSES_FULL[fault] ?? [])] : ADDRESSES_DEFAULT[fault] ?? [], DEFENSES);
    for (const d of defenses) out.push(cell(preset, faults, [d], 'defense', `${incident ? 'the incident' : fault} with ${d} alone`, opts));
  }
  return out;
}

/** The default run's cells. */
export function matrixCells(full: boolean): EngineCell[] {
  const presets = [
    cell('incident', [], [], 'positive', 'the incident: disaggregated, pool 681,280 < context 1,048,576, admission-checks-finished'),
    cell('remediated', [], [], 'negative', 'the deployed fix: pool ~2.04M, rejection before bootstrap'),
    cell('hardened', [], [], 'negative', "the incident's capacities, every defense, no fault"),
  ];
  if (!full) return [...presets, ...faultCells(false)];
  return [
    ...presets,
    cell('single', [], [], 'negative', 'single node, correct admission (the postmortem: this path returned an error)'),
    cell('disaggregated', [], [], 'negative', "the incident's capacities, no fault, no defense: the base the fault cells add to"),
    cell('single', [], [], 'negative', 'single node, lifo free list: just-freed pages reused first', { freeList: 'lifo' }),
    cell('incident', [], [], 'positive', 'the incident, lifo free list', { freeList: 'lifo' }),
    ...faultCells(true),
    ...(FAULTS as readonly string[])
      .filter((f) => f !== INCIDENT_FAULT && baseFor(f) === 'disaggregated')
      .map((f) => cell('hardened', [f], [], 'defense', `${f} against every defense`, { aimed: AIMED[f], ...(FREE_LIST[f] !== undefined ? { freeList: FREE_LIST[f] } : {}) })),
    cell('hardened', [INCIDENT_FAULT], [], 'defense', 'the incident fault against every defense', { aimed: AIMED[INCIDENT_FAULT] }),
  ];
}

/** Every cell either run can measure (what --cell accepts). */
export const ALL_CELLS: readonly EngineCell[] = matrixCells(true);

/** A load sweep: one engine cell and the scenario aimed at its fault, under background churn. */
export interface LoadCell {
  engine: EngineCell;
  scenario: string;
}

/** The first sweep runs by default (it carries both signals); the others with --full. */
export const LOAD_CELLS: readonly LoadCell[] = [
  { engine: cell('incident', [], [], 'positive', 'the incident under load'), scenario: 'overlimit-handoff' },
  { engine: cell('disaggregated', ['late-write'], [], 'positive', 'late-write under load'), scenario: 'abort-race' },
  { engine: cell('disaggregated', ['offload-release-race'], [], 'positive', 'offload race under load'), scenario: 'abort-race' },
];

/**
 * Background load, in pool turnovers per second: load clients together send prompts totalling this many
 * times the engine's KV pool (as /get_server_info reports it) each second. 0 is the idle baseline.
 */
export const LOAD_LEVELS: readonly number[] = [0, 2, 8, 32];
/** The default run's levels (--full sweeps LOAD_LEVELS). */
export const LOAD_LEVELS_QUICK: readonly number[] = [0, 4, 16];

/** Engines probed for false positives: the fixed configurations. (The noise server is added by the section.) */
export const NEGATIVE_CELLS: readonly EngineCell[] = [
  cell('remediated', [], [], 'negative', 'the deployed fix'),
  cell('hardened', [], [], 'negative', 'every defense on (pool-below-context is expected here, and not counted)'),
];

/** The single-node engine: the stand-in where a preset is missing. */
export const SINGLE_CELL: EngineCell = cell('single', [], [], 'negative', 'single node, correct admission');
