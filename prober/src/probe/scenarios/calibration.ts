/**
 * Token sizing on a tokenizer we do not know. The filler family (prompts.ts) is linear in its repetition
 * count on any tokenizer, so two measured points fix it: via the endpoint's /tokenize where it has one
 * (free), otherwise via `usage.prompt_tokens` of two one-token completions (billed, recorded like any
 * other request). Chat prompts always use usage, since /tokenize does not count the chat template.
 */
import { calibrate, type PromptSource, type TokenLine } from '../prompts.js';
import type { ScenarioContext } from './context.js';
import { exchange, type Exchange } from './exchange.js';

export async function tokenLine(ctx: ScenarioContext, record: (ex: Exchange | undefined) => void): Promise<TokenLine | undefined> {
  if (ctx.calibration.tried) return ctx.calibration.line;
  ctx.calibration.tried = true;
  const tokenize = ctx.introspection.tokenize;
  if (tokenize !== undefined && ctx.api === 'completions') {
    ctx.calibration.line = await calibrate((source) => tokenize(source), 'tokenize');
  }
  if (ctx.calibration.line === undefined) {
    ctx.calibration.line = await calibrate(async (source: PromptSource) => {
      const ex = await exchange(ctx, { role: 'calibration', prompt: source, promptTokens: source.totalChars, maxTokens: 1, stream: false });
      record(ex);
      return ex?.result.transport === 'ok' ? ex.result.usage?.promptTokens : undefined;
    }, 'usage');
  }
  return ctx.calibration.line;
}
