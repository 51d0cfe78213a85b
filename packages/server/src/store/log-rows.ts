type Raw = Record<string, unknown>;

/** The bytes [offset, offset + maxBytes) of rows that cover them, in order. */
export function sliceRows(rows: Raw[], offset: number, maxBytes: number): Buffer {
  const parts = rows.map((r) => {
    const start = Number(r.start_offset);
    const data = r.data as Buffer;
    return data.subarray(Math.max(0, offset - start), Math.max(0, offset + maxBytes - start));
  });
  return Buffer.concat(parts);
}
