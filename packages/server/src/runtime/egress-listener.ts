// Started inside the egress proxy's network namespace (`ip netns exec`): makes the listening
// sockets it is asked for there (TCP servers, bound UDP sockets), hands each to the daemon over the
// IPC channel, and exits. The sockets stay in that namespace; the daemon uses them from its own.
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createServer, type Server } from 'node:net';

interface Spec {
  proto: 'tcp' | 'udp';
  host: string;
  port: number;
}

/** Room for a burst of datagrams from many sandboxes (the kernel caps it at net.core.rmem_max). */
const UDP_RECV_BUFFER = 4 * 1024 * 1024;

const specs = JSON.parse(process.argv[2] ?? '[]') as Spec[];
let sent = 0;
const fail = (s: Spec, err: Error) => {
  process.stderr.write(`egress listener: ${s.proto} ${s.host}:${s.port}: ${err.message}\n`);
  process.exit(1);
};
const hand = (s: Spec, handle: Server | UdpSocket, close: () => void) => {
  process.send!(s, handle, (err: Error | null) => {
    if (err) return fail(s, err);
    close();
    if (++sent === specs.length) process.disconnect();
  });
};
for (const s of specs) {
  if (s.proto === 'udp') {
    const sock = createSocket({ type: 'udp4' });
    sock.on('error', (err) => fail(s, err));
    sock.bind({ address: s.host, port: s.port, exclusive: true }, () => {
      try {
        sock.setRecvBufferSize(UDP_RECV_BUFFER);
      } catch {
        // The kernel's default is enough to start with.
      }
      hand(s, sock, () => sock.close());
    });
  } else {
    const server = createServer();
    server.on('error', (err) => fail(s, err));
    server.listen({ host: s.host, port: s.port, backlog: 1024 }, () => hand(s, server, () => server.close()));
  }
}
