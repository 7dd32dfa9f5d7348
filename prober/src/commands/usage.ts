/** Bad command-line usage: reported with the command's help, exit 64. */
export class UsageError extends Error {
  readonly code = 'KVC_USAGE';
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export function positiveIntFlag(flag: string, text: string): number {
  if (!/^\d+$/.test(text) || Number(text) <= 0 || !Number.isSafeInteger(Number(text))) throw new UsageError(`${flag}: expected a positive integer, got '${text}'`);
  return Number(text);
}
