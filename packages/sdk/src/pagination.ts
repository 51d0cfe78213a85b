import { SandboxdError } from './errors.js';

export interface Page<T> {
  data: T[];
  hasMore: boolean;
  nextCursor: string | null;
}

export type PageFetcher<T> = (cursor: string | undefined, signal: AbortSignal | undefined) => Promise<Page<T>>;

/**
 * Cursor pagination. Iterating yields items, fetching the next page only when the current one is
 * used up; `pages()` yields whole pages. A page that says `hasMore` but gives no new cursor ends the
 * iteration with an error instead of fetching the same page forever.
 */
export class Paginator<T> implements AsyncIterable<T> {
  constructor(
    private readonly fetchPage: PageFetcher<T>,
    private readonly options: { signal?: AbortSignal; maxItems?: number } = {},
  ) {}

  async *pages(): AsyncGenerator<Page<T>, void, undefined> {
    let cursor: string | undefined;
    const seen = new Set<string>();
    for (;;) {
      const page = await this.fetchPage(cursor, this.options.signal);
      yield page;
      if (!page.hasMore) return;
      if (!page.nextCursor || seen.has(page.nextCursor)) {
        throw new SandboxdError('the service said there are more results but gave no new cursor', { code: 'INVALID_RESPONSE' });
      }
      seen.add(page.nextCursor);
      cursor = page.nextCursor;
    }
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T, void, undefined> {
    let n = 0;
    const max = this.options.maxItems ?? Infinity;
    if (n >= max) return;
    for await (const page of this.pages()) {
      for (const item of page.data) {
        yield item;
        if (++n >= max) return;
      }
    }
  }

  /** All items (up to `maxItems`), in order. */
  async toArray(): Promise<T[]> {
    const out: T[] = [];
    for await (const item of this) out.push(item);
    return out;
  }
}
