// What a template build is, as the builder runs it: normalized steps in, cached layers out. The
// services (template-builds/) own the request, its validation and its record; the builder owns this.

/** A build step after normalization of both request shapes. */
export type BuildStep =
  | { type: 'from'; image: string }
  | { type: 'apt'; packages: string[] }
  | { type: 'run'; command: string }
  | { type: 'copy'; dest: string; fileIds: string[]; srcPaths: string[]; filesHash: string | null; owner: string | null; permissions: string | null }
  | { type: 'env'; key: string; value: string }
  | { type: 'workdir'; path: string };

/** A file a COPY step puts into the image: an uploaded blob, or a tarball to unpack. */
export interface CopyInput {
  hostPath: string;
  kind: 'file' | 'tarball';
  /** Destination name for a single file (basename of the uploaded path); tarballs unpack under dest. */
  name: string;
  /** Content hash, part of the step's cache key. */
  sha256: string;
}

export interface BuildEngineInput {
  buildId: string;
  /** Cache entries and step layers are per organization. */
  orgId: string;
  steps: BuildStep[];
  resources: { vcpu: number; memoryMb: number; diskGb: number };
  skipCache: boolean;
  /** Resolved copy inputs, by step index. */
  copies: Map<number, CopyInput[]>;
}

export interface BuildEngineHooks {
  log(line: string): void;
  progress(percent: number, currentStep: string): void;
  signal: AbortSignal;
  /** Before a step is run (not one taken from the cache): room for the layer it writes (services/disk-room.ts); a throw fails the build. */
  beforeStep?(): Promise<void>;
}

export interface BuildEngineResult {
  /** Layer ids, top-most first (base image layers included). */
  layerIds: string[];
  env: Record<string, string>;
  workdir: string | null;
}

/** Turns normalized steps into cached layers (implemented by builder/). */
export interface BuildEngine {
  run(input: BuildEngineInput, hooks: BuildEngineHooks): Promise<BuildEngineResult>;
}
