import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseListening } from './listening.js';

// Lines as the kernel writes them (a listener on 127.0.0.1:3000, one on all addresses :8080, an
// established connection that is not a listener).
const TCP = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1234 1 0000000000000000 100 0 0 10 0
   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1235 1 0000000000000000 100 0 0 10 0
   2: 0100007F:0BB8 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 1236 1 0000000000000000 20 4 30 10 -1
`;
const TCP6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1388 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1389 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 98 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:138A 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 97 1 0000000000000000 100 0 0 10 0
`;

test('listening sockets of /proc/net/tcp and tcp6, and nothing else', () => {
  assert.deepEqual(parseListening(TCP, 4), [
    { port: 3000, address: '127.0.0.1', family: 4 },
    { port: 8080, address: '0.0.0.0', family: 4 },
  ]);
  assert.deepEqual(parseListening(TCP6, 6), [
    { port: 5000, address: '::', family: 6 },
    { port: 5001, address: '::1', family: 6 },
    { port: 5002, address: '::ffff:7f00:1', family: 6 },
  ]);
  // Whatever else a table could hold is skipped, never thrown on.
  assert.deepEqual(parseListening('header\n garbage\n 0: zz:zz 0 0A\n 1: 0100007F:0000 0 0A\n\n', 4), []);
});
