import { ServiceError } from '@sandboxd/protocol';

/** Where a page of a listing ordered by (createdAt, id) begins: after the last row of the one before. */
export interface PageStart {
  createdAt: string;
  id: string;
}

/** A page of rows (`limit` of the `limit + 1` read), and the cursor of the next one when there is more. */
export function page<T extends PageStart>(rows: T[], limit: number): { page: T[]; hasMore: boolean; nextCursor: string | null } {
  const hasMore = rows.length > limit;
  const shown = rows.slice(0, limit);
  const last = shown[shown.length - 1];
  return { page: shown, hasMore, nextCursor: hasMore && last ? cursorAfter(last) : null };
}

/** The cursor of the page that begins after `item`. */
export function cursorAfter(item: PageStart): string {
  return Buffer.from(JSON.stringify([item.createdAt, item.id])).toString('base64url');
}

/** A cursor a listing gave as next_cursor, read back (a client's text: checked); undefined: the first page. */
export function pageStart(cursor: string | undefined): PageStart | undefined {
  if (!cursor) return undefined;
  try {
    // Exactly what next_cursor holds: a string would destructure into its first two characters.
    const parsed: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (!Array.isArray(parsed) || parsed.length !== 2 || typeof parsed[0] !== 'string' || typeof parsed[1] !== 'string') throw new Error('bad cursor');
    return { createdAt: parsed[0], id: parsed[1] };
  } catch {
    throw new ServiceError('VALIDATION_ERROR', 'cursor is not a value returned as next_cursor');
  }
}
