// Started inside the egress proxy's network namespace (`ip netns exec`): makes one listening
// socket per inspected port there, hands each to the daemon over the IPC channel, and exits. The
// sockets stay in that namespace; the daemon accepts on them from its own.
import { createServer } from 'node:net';

const ports = JSON.parse(process.argv[2] ?? '[]') as number[];
let sent = 0;
for (const port of ports) {
  const server = createServer();
  server.on('error', (err) => {
    process.stderr.write(`egress listener: port ${port}: ${err.message}\n`);
    process.exit(1);
  });
  server.listen({ host: '0.0.0.0', port, backlog: 1024 }, () => {
    process.send!({ port }, server, (err: Error | null) => {
      if (err) {
        process.stderr.write(`egress listener: port ${port}: ${err.message}\n`);
        process.exit(1);
      }
      server.close();
      if (++sent === ports.length) process.disconnect();
    });
  });
}
