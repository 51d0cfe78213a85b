import assert from 'node:assert/strict';
import { test } from 'node:test';
import { appSetCookieAllowed, PREVIEW_DROPPED_SET_COOKIE, withoutPreviewCookies } from './proxy.js';

test("an app's Set-Cookie reaches the browser unless it is named like the gateway's, in any case, or is nameless", () => {
  for (const ok of ['app=1; Path=/', 'theme=dark', 'a=sbxp_x', 'sbx=1', ' spaced = 1 ; Path=/']) assert.ok(appSetCookieAllowed(ok), ok);
  for (const bad of ['sbxp_x_3000=tok', 'SBXP_x=1', 'Sbxp_=1; Path=/', ' sbxp_x=1', '=sbxp_x_3000=tok', '=x', 'sbxp_bare', 'bare; Path=/', ' =1']) {
    assert.ok(!appSetCookieAllowed(bad), bad);
  }
});

test('the same for the raw lines of an upgrade answer', () => {
  for (const kept of ['Set-Cookie: app=1; Path=/', 'set-cookie:theme=dark', 'Upgrade: websocket', 'X-Set-Cookie: =1']) assert.ok(!PREVIEW_DROPPED_SET_COOKIE.test(kept), kept);
  for (const dropped of ['Set-Cookie: sbxp_x=1', 'SET-COOKIE: SBXP_x=1', 'Set-Cookie:  =sbxp_x=1', 'set-cookie: bare', 'Set-Cookie: bare; Path=/', 'Set-Cookie:=x']) {
    assert.ok(PREVIEW_DROPPED_SET_COOKIE.test(dropped), dropped);
  }
});

test("the app never gets the gateway's cookies, whatever their case", () => {
  assert.equal(withoutPreviewCookies('sbxp_a_1=t; theme=dark; SBXP_b_2=u; Sbxp_c=v'), 'theme=dark');
  assert.equal(withoutPreviewCookies('sbxp_a_1=t'), undefined);
  assert.equal(withoutPreviewCookies(undefined), undefined);
});
