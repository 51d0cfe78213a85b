// Unit tests of the DNS filter's reading of queries and making of answers (dns-wire.ts): real
// queries as a stub resolver writes them, and hostile or malformed bytes, which must give a
// refusal or nothing, never a throw.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { answer, QTYPE, RCODE, readQuery, relayAnswer, upstreamQuery } from './dns-wire.js';

/** A query as glibc writes it: ID, RD, one question, and optionally an OPT record with options. */
function query(name: string, qtype: number, opts: { id?: number; edns?: number; ednsOption?: Buffer } = {}): Buffer {
  const h = Buffer.alloc(12);
  h.writeUInt16BE(opts.id ?? 0x1234, 0);
  h.writeUInt16BE(0x0100, 2);
  h.writeUInt16BE(1, 4);
  h.writeUInt16BE(opts.edns === undefined ? 0 : 1, 10);
  const labels = name ? name.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l, 'latin1')])) : [];
  const tail = Buffer.alloc(5);
  tail.writeUInt16BE(qtype, 1);
  tail.writeUInt16BE(1, 3);
  const parts: Buffer[] = [h, ...labels, tail];
  if (opts.edns !== undefined) {
    const opt = Buffer.alloc(11);
    opt.writeUInt16BE(QTYPE.OPT, 1);
    opt.writeUInt16BE(opts.edns, 3);
    opt.writeUInt32BE(0x00008000, 5); // the DO bit
    const o = opts.ednsOption ?? Buffer.alloc(0);
    opt.writeUInt16BE(o.length, 9);
    parts.push(opt, o);
  }
  return Buffer.concat(parts);
}

describe('DNS queries as the filter reads them', () => {
  test('a real query: the name in lowercase, the type, the question bytes as sent, EDNS size', () => {
    const r = readQuery(query('Pypi.ORG', QTYPE.AAAA, { edns: 4096, ednsOption: Buffer.from('000a0008c0ffeec0ffeec0ff', 'hex') }));
    assert.ok(r.ok);
    assert.equal(r.query.name, 'pypi.org');
    assert.equal(r.query.qtype, QTYPE.AAAA);
    assert.equal(r.query.edns, 4096);
    assert.equal(r.query.question.toString('latin1'), '\x04Pypi\x03ORG\x00\x00\x1c\x00\x01');
    const plain = readQuery(query('a.test', QTYPE.A));
    assert.ok(plain.ok && plain.query.edns === undefined && plain.query.rd);
  });

  test('refused (with the ID, and the question when readable) or dropped: never a throw', () => {
    const refusedWithQuestion = (b: Buffer) => {
      const r = readQuery(b);
      assert.ok(!r.ok && r.id === 0x1234 && r.question, b.toString('hex'));
    };
    const refused = (b: Buffer) => {
      const r = readQuery(b);
      assert.ok(!r.ok && r.id === 0x1234, b.toString('hex'));
    };
    const dropped = (b: Buffer) => assert.deepEqual(readQuery(b), { ok: false }, b.toString('hex'));
    dropped(Buffer.alloc(0));
    dropped(Buffer.from('1234010000', 'hex'));
    const asAnswer = query('a.test', 1);
    asAnswer[2] |= 0x80;
    dropped(asAnswer);
    const two = query('a.test', 1);
    two.writeUInt16BE(2, 4);
    refused(two);
    const notify = query('a.test', 1);
    notify[2] |= 4 << 3;
    refused(notify);
    refused(query('a.test', 1).subarray(0, 20)); // cut in the name
    refused(query('a.test', 1).subarray(0, 21)); // cut in the type
    refused(query('a\\.b.test', 1)); // a label with a dot (or any odd byte) in it
    refused(query('a b.test', 1));
    refused(query(`${'x'.repeat(64)}.test`, 1));
    // A compression pointer in a query's name.
    refused(Buffer.concat([query('', 1).subarray(0, 12), Buffer.from('c00c00010001', 'hex')]));
    const chaos = query('version.bind', QTYPE.TXT);
    chaos.writeUInt16BE(3, chaos.length - 2);
    refusedWithQuestion(chaos);
    refusedWithQuestion(Buffer.concat([query('a.test', 1), Buffer.from([0])])); // trailing bytes
    const badOpt = query('a.test', 1, { edns: 1232 });
    badOpt.writeUInt16BE(200, badOpt.length - 2); // OPT data longer than the packet
    refusedWithQuestion(badOpt);
    for (let i = 0; i < 20_000; i++) readQuery(randomBytes(1 + (i % 80)));
  });
});

describe('answers made and relayed', () => {
  test('a refusal carries the ID, the question and REFUSED', () => {
    const r = readQuery(query('X.evil.test', QTYPE.A, { id: 77 }));
    assert.ok(r.ok);
    const a = answer(77, RCODE.REFUSED, r.query.question);
    assert.equal(a.readUInt16BE(0), 77);
    assert.equal(a[3]! & 0xf, RCODE.REFUSED);
    assert.ok(a[2]! & 0x80, 'an answer');
    assert.ok(a.subarray(12).equals(r.query.question));
  });

  test("upstream gets the filter's own words; the answer goes back with the client's ID and question bytes", () => {
    const r = readQuery(query('A.Test', QTYPE.A, { id: 5, edns: 65000, ednsOption: Buffer.from('000a0008aaaaaaaaaaaaaaaa', 'hex') }));
    assert.ok(r.ok);
    const sent = upstreamQuery(r.query, 999);
    assert.equal(sent.readUInt16BE(0), 999);
    assert.equal(sent.toString('latin1', 12, 12 + r.query.question.length), '\x01a\x04test\x00\x00\x01\x00\x01', 'the name in lowercase');
    assert.equal(sent.length, 12 + r.query.question.length + 11, 'an OPT record without options');
    assert.equal(sent.readUInt16BE(sent.length - 8), 1232, 'payload size capped');
    assert.equal(sent.readUInt32BE(sent.length - 6), 0, 'no DO bit');
    // The resolver's answer: its question (in another case), one A record.
    const rr = Buffer.from('c00c000100010000003c00040b172d2d', 'hex');
    const got = Buffer.concat([sent.subarray(0, 12), Buffer.from('\x01A\x04TEST\x00\x00\x01\x00\x01', 'latin1'), rr]);
    got.writeUInt16BE(0x8180, 2);
    got.writeUInt16BE(1, 6);
    got.writeUInt16BE(0, 10);
    const out = relayAnswer(got, sent, r.query)!;
    assert.equal(out.readUInt16BE(0), 5);
    assert.ok(out.subarray(12, 12 + r.query.question.length).equals(r.query.question), "the client's own question bytes");
    assert.ok(out.subarray(out.length - rr.length).equals(rr));
    // Not an answer to that query: another ID, another type, not an answer at all.
    const other = Buffer.from(got);
    other.writeUInt16BE(1000, 0);
    assert.equal(relayAnswer(other, sent, r.query), undefined);
    const otherType = Buffer.from(got);
    otherType.writeUInt16BE(QTYPE.TXT, 12 + r.query.question.length - 4);
    assert.equal(relayAnswer(otherType, sent, r.query), undefined);
    assert.equal(relayAnswer(sent, sent, r.query), undefined, 'the query itself');
    assert.equal(relayAnswer(got.subarray(0, 14), sent, r.query), undefined);
  });
});
