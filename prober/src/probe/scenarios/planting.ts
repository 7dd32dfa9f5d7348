/**
 * Planters: prompts dense with registered markers, so every KV page they fill carries marker text. The
 * markers are registered (and handed to onMarkers for persistence) before the request leaves.
 */
import { planterPrompt, repeatedPlanterPrompt } from '../prompts.js';
import type { ScenarioContext, Tenant } from './context.js';
import { exchange, type Exchange } from './exchange.js';
import type { AbortAfter } from '../target/client.js';

/** Envelope plus separator: 36 characters. Tokens per marker start pessimistic (one per character) until measured. */
const MARKER_CHARS = 36;
/** A repeated-layout copy: newline, cue line and body: 62 characters. */
const REPEATED_CHARS = 62;
const PLANTER_OVERHEAD_CHARS = 80;

export interface PlanterSizing {
  /** Measured or assumed tokens one marker (with its separator) costs. */
  tokensPerMarker: number;
  measured: boolean;
}

export function initialSizing(): PlanterSizing {
  return { tokensPerMarker: MARKER_CHARS, measured: false };
}

export interface PlantSpec {
  tokens: number;
  role?: string;
  tenant?: Tenant;
  maxTokens: number;
  stream?: boolean;
  abortAfter?: AbortAfter;
}

export async function plant(
  ctx: ScenarioContext,
  sizing: PlanterSizing,
  spec: PlantSpec,
): Promise<{ ex: Exchange | undefined; markers: number; prompt: string; sent: string[]; estimate: number }> {
  const tenant = spec.tenant ?? ctx.tenants[0]!;
  const role = spec.role ?? 'planter';
  const repeated = ctx.tuning.planterLayout === 'repeated';
  // Until measured, the repeated layout's copies are assumed as long in tokens as in characters, like the dense one's.
  if (repeated && !sizing.measured) sizing.tokensPerMarker = Math.max(sizing.tokensPerMarker, REPEATED_CHARS);
  const count = Math.max(1, Math.floor((spec.tokens - PLANTER_OVERHEAD_CHARS / 4) / sizing.tokensPerMarker));
  const requestId = ctx.newRequestId(role);
  const entries = Array.from({ length: repeated ? 1 : count }, () => ctx.registry.plant({ runId: ctx.runId, requestId, role, tenant: tenant.name }));
  ctx.onMarkers(entries);
  const prompt = repeated ? repeatedPlanterPrompt(entries[0]!.marker, count) : planterPrompt(entries.map((e) => e.marker));
  const estimate = Math.round(count * sizing.tokensPerMarker + PLANTER_OVERHEAD_CHARS / 4);
  const ex = await exchange(ctx, {
    role,
    tenant,
    requestId,
    prompt,
    promptTokens: estimate,
    maxTokens: spec.maxTokens,
    stream: spec.stream ?? false,
    ...(spec.abortAfter !== undefined ? { abortAfter: spec.abortAfter } : {}),
  });
  const usage = ex?.result.usage;
  if (usage !== undefined && usage.promptTokens > 0 && !sizing.measured) {
    sizing.tokensPerMarker = Math.max(1, (usage.promptTokens - PLANTER_OVERHEAD_CHARS / 4) / count);
    sizing.measured = true;
  }
  return { ex, markers: count, prompt, sent: entries.map((e) => e.marker), estimate };
}
