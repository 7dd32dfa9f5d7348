/**
 * Splitting targets across prober replicas: rendezvous (highest-random-weight) hashing on the target name.
 *
 * Every replica computes, for each target, a score per shard index and keeps the targets whose best score
 * is its own index. No coordination: every replica with the same target list and COUNT agrees, each target
 * goes to exactly one shard, and changing COUNT from n to n+1 moves only the targets the new shard wins
 * (about 1/(n+1) of them); the others keep their shard.
 */
import { createHash } from 'node:crypto';
import { shownString } from '../shown-value.js';

export interface Shard {
  /** 0-based. */
  index: number;
  count: number;
}

export const SINGLE_SHARD: Shard = { index: 0, count: 1 };

export class ShardError extends Error {
  override readonly name = 'ShardError';
}

export function formatShard(s: Shard): string {
  return `${s.index}/${s.count}`;
}

/** Parses `INDEX/COUNT` (0 <= INDEX < COUNT <= 1024); throws ShardError naming `what` otherwise. */
export function parseShard(text: string, what = '--shard'): Shard {
  const m = /^\s*(\d{1,4})\s*\/\s*(\d{1,4})\s*$/.exec(text);
  if (m === null) throw new ShardError(`${what}: expected INDEX/COUNT such as 0/3 (0-based), got ${shownString(text)}`);
  return checkShard(Number(m[1]), Number(m[2]), what);
}

function checkShard(index: number, count: number, what: string): Shard {
  if (!Number.isInteger(count) || count < 1 || count > 1024) throw new ShardError(`${what}: COUNT must be an integer 1-1024, got ${count}`);
  if (!Number.isInteger(index) || index < 0 || index >= count) throw new ShardError(`${what}: INDEX must be 0-based and below COUNT (${count}), got ${index}`);
  return { index, count };
}

/**
 * The shard from `--shard`, else KVCANARY_SHARD=INDEX/COUNT, else KVCANARY_SHARD_INDEX + KVCANARY_SHARD_COUNT
 * (a StatefulSet sets the index from the pod's ordinal). KVCANARY_SHARD_INDEX may also be a pod name ending
 * in `-N` (`metadata.name` of a StatefulSet pod), so the manifest needs no shell. Undefined when none is set.
 */
export function shardFromArgs(flag: string | undefined, env: Record<string, string | undefined>): Shard | undefined {
  if (flag !== undefined) return parseShard(flag, '--shard');
  const whole = env.KVCANARY_SHARD;
  if (whole !== undefined && whole !== '') return parseShard(whole, 'KVCANARY_SHARD');
  const rawIndex = env.KVCANARY_SHARD_INDEX;
  const rawCount = env.KVCANARY_SHARD_COUNT;
  if ((rawIndex ?? '') === '' && (rawCount ?? '') === '') return undefined;
  if ((rawIndex ?? '') === '' || (rawCount ?? '') === '') {
    throw new ShardError('KVCANARY_SHARD_INDEX and KVCANARY_SHARD_COUNT must be set together');
  }
  const im = /^(?:.*-)?(\d{1,4})$/.exec(rawIndex!.trim());
  if (im === null) throw new ShardError(`KVCANARY_SHARD_INDEX: expected a number or a pod name ending in -N, got ${shownString(rawIndex!)}`);
  if (!/^\d{1,4}$/.test(rawCount!.trim())) throw new ShardError(`KVCANARY_SHARD_COUNT: expected a number, got ${shownString(rawCount!)}`);
  return checkShard(Number(im[1]), Number(rawCount), 'KVCANARY_SHARD_INDEX/KVCANARY_SHARD_COUNT');
}

function score(name: string, index: number): bigint {
  return createHash('sha256').update(`${index}\u0000${name}`).digest().readBigUInt64BE(0);
}

/** The shard index that owns `name` among `count` shards. */
export function shardOf(name: string, count: number): number {
  let best = 0;
  let bestScore = -1n;
  for (let i = 0; i < count; i++) {
    const s = score(name, i);
    if (s > bestScore) { bestScore = s; best = i; }
  }
  return best;
}

export function owns(shard: Shard, name: string): boolean {
  return shard.count === 1 || shardOf(name, shard.count) === shard.index;
}
