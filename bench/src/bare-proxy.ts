// A bare HTTP reverse proxy in a process of its own: what any proxy costs a call on this machine
// (its two extra process wake-ups and loopback writes), with none of sandboxd's work (no route,
// no credential, no checks of the answer). bench/cluster takes it as the edge hop's raw baseline.
// Usage: node bench/dist/bare-proxy.js <agent socket> <port>; prints "listening" once it listens.
import { Agent, createServer, request } from 'node:http';

const [socketPath, port] = [process.argv[2]!, Number(process.argv[3])];
const upstream = new Agent({ keepAlive: true, maxSockets: 8 });
const server = createServer((req, res) => {
  const up = request({ socketPath, agent: upstream, method: req.method, path: req.url, headers: req.headers }, (ures) => {
    res.writeHead(ures.statusCode ?? 502, ures.headers);
    ures.pipe(res);
  });
  up.on('error', () => res.destroy());
  req.pipe(up);
});
server.keepAliveTimeout = 65_000;
server.listen(port, '127.0.0.1', () => console.log('listening'));
