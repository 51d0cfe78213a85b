/**
 * Multi-step work pushes the inverse of each step as it succeeds; on failure the stack runs in
 * reverse exactly once. An undo that fails is logged and the rest still run: leaving one thing
 * behind is better than leaving everything behind.
 */
export class UndoStack {
  private readonly steps: Array<{ name: string; fn: () => Promise<void> | void }> = [];
  private done = false;

  constructor(private readonly log: (msg: string) => void) {}

  push(name: string, fn: () => Promise<void> | void): void {
    if (this.done) throw new Error('undo stack already ran');
    this.steps.push({ name, fn });
  }

  async run(): Promise<void> {
    if (this.done) return;
    this.done = true;
    while (this.steps.length > 0) {
      const step = this.steps.pop()!;
      try {
        await step.fn();
      } catch (err) {
        this.log(`undo ${step.name} failed: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }

  /** Success: forget the undo steps. */
  commit(): void {
    this.done = true;
    this.steps.length = 0;
  }
}
