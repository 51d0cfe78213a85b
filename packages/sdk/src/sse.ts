export interface SseEvent {
  event: string;
  data: string;
  id?: string;
}

/**
 * Parses a `text/event-stream` body (WHATWG rules: `event:`, `data:` lines joined by newlines,
 * `id:`, comments starting with `:`, a blank line dispatches; CRLF, CR and LF all end lines).
 */
export async function* parseSse(chunks: AsyncIterable<Uint8Array | string>): AsyncGenerator<SseEvent, void, undefined> {
  const decoder = new TextDecoder();
  let buffer = '';
  let event = '';
  let data: string[] = [];
  let id: string | undefined;
  let sawData = false;

  function* lines(final: boolean): Generator<string> {
    for (;;) {
      const m = /\r\n|\r|\n/.exec(buffer);
      // A lone CR at the end may be the first half of CRLF: wait for the next chunk.
      if (!m || (!final && m[0] === '\r' && m.index === buffer.length - 1)) return;
      const line = buffer.slice(0, m.index);
      buffer = buffer.slice(m.index + m[0].length);
      yield line;
    }
  }

  function* take(line: string): Generator<SseEvent> {
    if (line === '') {
      if (sawData) {
        const e: SseEvent = { event: event || 'message', data: data.join('\n') };
        if (id !== undefined) e.id = id;
        yield e;
      }
      event = '';
      data = [];
      sawData = false;
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') {
      data.push(value);
      sawData = true;
    } else if (field === 'id' && !value.includes('\0')) id = value;
  }

  for await (const chunk of chunks) {
    buffer += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
    for (const line of lines(false)) yield* take(line);
  }
  buffer += decoder.decode();
  for (const line of lines(true)) yield* take(line);
  if (buffer !== '') yield* take(buffer);
  // A stream that ends without a final blank line still delivers its last event.
  yield* take('');
}
