/**
 * Child process of `npm run bench:scale`: N fast fake OpenAI-compatible endpoints on 127.0.0.1 (one port
 * each), so one prober replica can be measured against 50, 200 or 1,000 targets without an engine's cost.
 * Each one: a 2,048-token context (4 chars a token), /tokenize, over-limit prompts rejected with vLLM's 400,
 * completions (streamed or not) that echo one of the prompt's own markers and a few words.
 *
 *   node --import tsx bench/scale-endpoints.ts --count 50
 *
 * Prints one JSON line {"urls": [...]}, then serves until SIGTERM.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';

const { values } = parseArgs({ options: { count: { type: 'string', default: '50' }, context: { type: 'string', default: '2048' } }, strict: true });
const count = Number(values.count);
const context = Number(values.context);
const tokens = (text: string): number => Math.ceil(text.length / 4) + 1;

function promptOf(b: Record<string, unknown>): string {
  if (typeof b.prompt === 'string') return b.prompt;
  return Array.isArray(b.messages) ? b.messages.map((m: { content?: unknown }) => (typeof m?.content === 'string' ? m.content : '')).join('\n') : '';
}

function endpoint(): Server {
  return createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const json = (status: number, value: unknown): void => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(value));
      };
      if (req.url === '/v1/models') return json(200, { object: 'list', data: [{ id: 'fake', object: 'model', max_model_len: context }] });
      let b: Record<string, unknown> = {};
      try { b = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown>; } catch { return json(400, { error: { message: 'bad json', code: 400 } }); }
      if (req.url === '/tokenize') return json(200, { count: tokens(promptOf(b)), max_model_len: context, tokens: [] });
      if (req.url !== '/v1/completions' && req.url !== '/v1/chat/completions') return json(404, { error: { message: 'not found', code: 404 } });
      const prompt = promptOf(b);
      const n = tokens(prompt);
      const maxTokens = Number(b.max_tokens ?? 16);
      if (n + maxTokens > context) {
        return json(400, { error: { message: `This model's maximum context length is ${context} tokens. However, you requested ${n + maxTokens} tokens.`, type: 'BadRequestError', code: 400 } });
      }
      const own = prompt.match(/kvcanary-[a-z2-7]{26}/);
      const text = `${own === null ? '' : `${own[0]} `}the quick brown fox jumps over the lazy dog`;
      const chat = req.url === '/v1/chat/completions';
      const usage = { prompt_tokens: n, completion_tokens: 12, total_tokens: n + 12 };
      if (b.stream === true) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const choice = chat ? { index: 0, delta: { content: text }, finish_reason: 'length' } : { index: 0, text, finish_reason: 'length' };
        res.write(`data: ${JSON.stringify({ id: 'x', choices: [choice] })}\n\n`);
        res.write(`data: ${JSON.stringify({ id: 'x', choices: [], usage })}\n\n`);
        res.end('data: [DONE]\n\n');
        return;
      }
      const choice = chat ? { index: 0, message: { role: 'assistant', content: text }, finish_reason: 'length' } : { index: 0, text, finish_reason: 'length' };
      json(200, { id: 'x', choices: [choice], usage });
    });
  });
}

const servers: Server[] = [];
const urls: string[] = [];
for (let i = 0; i < count; i++) {
  const s = endpoint();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  servers.push(s);
  urls.push(`http://127.0.0.1:${(s.address() as AddressInfo).port}`);
}
process.stdout.write(JSON.stringify({ urls }) + '\n');
const stop = (): void => { for (const s of servers) s.close(); setTimeout(() => process.exit(0), 100).unref(); };
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
