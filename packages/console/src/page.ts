// What the shell (main.ts) hands each page, in a module of its own: the pages and the shell that
// routes to them both need it.
import type { Notice } from './dom.js';

export interface Account {
  organization: { id: string; name: string };
  key: { id: string; name: string; scopes: string[] };
  operator: boolean;
}

/** What a page gets: where to draw, the signed-in account, and how to end the session. */
export interface PageContext {
  main: HTMLElement;
  notice: Notice;
  account: Account;
  /** A call failed with 401: the key is gone; back to the sign-in form. */
  unauthorized(err: unknown): boolean;
}

/** Draws a page into ctx.main; returns what to undo when the page is left (streams, timers). */
export type Page = (ctx: PageContext, arg: string) => (() => void) | undefined | Promise<(() => void) | undefined>;
