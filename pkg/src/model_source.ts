// Reading the model file in the worker, chunk by chunk, so it never sits whole in memory: from the
// Cache API when a URL was cached before, else from the network (copying it into the cache on the
// way), or from a Blob in 4 MiB slices.

import { ModelFetchError } from "./errors.js";
import type { WireSource } from "./protocol.js";

/** The Cache API cache the models are kept in. */
export const CACHE_NAME = "radixlm-models";

const SLICE_BYTES = 4 << 20;

/** Where the worker reads the model from, again after a lost device: a URL, or a Blob it keeps. */
export type ModelSource = { kind: "url"; url: string; cache: boolean } | { kind: "blob"; blob: Blob };

/** The page's source as the worker keeps it: bytes become a Blob, so the ArrayBuffer can go. */
export function modelSource(wire: WireSource): ModelSource {
  return wire.kind === "bytes" ? { kind: "blob", blob: new Blob([wire.bytes]) } : wire;
}

/** The model's bytes, being read. */
export interface ModelBytes {
  /** The file's size, when known up front. */
  total: number | undefined;
  /** Whether the bytes come over the network (so they count as a download). */
  fromNetwork: boolean;
  /** The file's bytes in order. Leaving the loop early stops the download. */
  chunks: AsyncIterable<Uint8Array>;
  /** Stops reading without iterating (the loader could not even start). */
  cancel(): void;
  /** Deletes the file from the Cache API, once any copy being written has settled: it is unusable. */
  forget(): Promise<void>;
}

/** Opens the model: resolves once its size is known (the response headers arrived), before any body. */
export async function openModel(source: ModelSource): Promise<ModelBytes> {
  if (source.kind === "blob") {
    return { total: source.blob.size, fromNetwork: false, chunks: slices(source.blob), cancel() {}, async forget() {} };
  }
  const { url } = source;
  const cache = source.cache ? await openCache() : undefined;
  const forget = async (written?: Promise<void>) => {
    await written;
    await cache?.delete(url);
  };
  const cached = await cache?.match(url);
  if (cached?.body) return fromStream(cached.body, url, contentLength(cached), false, { forget });

  const response = await download(url);
  const total = contentLength(response);
  if (!cache) return fromStream(response.body, url, total, true, { forget });
  const [forCache, forGpu] = response.body.tee();
  const copy = keep(cache, url, forCache, response.headers.get("content-type"), total);
  return fromStream(forGpu, url, total, true, { onCancel: copy.abandon, forget: () => forget(copy.written) });
}

async function* slices(blob: Blob): AsyncGenerator<Uint8Array> {
  for (let at = 0; at < blob.size; at += SLICE_BYTES) {
    yield new Uint8Array(await blob.slice(at, at + SLICE_BYTES).arrayBuffer());
  }
}

async function openCache(): Promise<Cache | undefined> {
  if (typeof caches === "undefined") return undefined;
  try {
    return await caches.open(CACHE_NAME);
  } catch (error) {
    // Some private modes refuse storage; the model still loads, it is just not kept.
    console.warn(`radixlm: the Cache API is unavailable (${String(error)}); the model will not be kept.`);
    return undefined;
  }
}

async function download(url: string): Promise<Response & { body: ReadableStream<Uint8Array> }> {
  let response: Response;
  try {
    response = await fetch(url);
  } catch (error) {
    throw new ModelFetchError(
      `Could not download the model from ${url} (${String(error)}). Check the URL and the network, and that the server allows this page's origin (CORS).`,
      { url },
    );
  }
  if (!response.ok) {
    throw new ModelFetchError(
      `Downloading the model from ${url} failed with HTTP ${`${response.status} ${response.statusText}`.trim()}. Check that the file is at that URL.`,
      { url, status: response.status },
    );
  }
  if (!response.body) throw new ModelFetchError(`The server sent no body for the model at ${url}.`, { url, status: response.status });
  return response as Response & { body: ReadableStream<Uint8Array> };
}

/** The body's size: Content-Length, unless the body is encoded (then the header counts other bytes). */
function contentLength(response: Response): number | undefined {
  const header = response.headers.get("content-length");
  const encoding = response.headers.get("content-encoding");
  if (header === null || (encoding !== null && encoding !== "identity")) return undefined;
  const length = Number(header);
  return Number.isSafeInteger(length) && length >= 0 ? length : undefined;
}

/**
 * Stores one branch of the download in the cache. A failed put (quota) only warns, and cancels
 * that branch so the tee stops buffering it. `abandon` gives up the copy when the load fails,
 * erroring the stream so a partial file is never stored; `written` settles when the put has.
 */
function keep(
  cache: Cache,
  url: string,
  body: ReadableStream<Uint8Array>,
  type: string | null,
  total: number | undefined,
): { abandon(): void; written: Promise<void> } {
  let abandoned = false;
  let fail!: (reason: unknown) => void;
  // An identity transform whose error cancels the tee branch feeding it.
  const guarded = body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      start(controller) {
        fail = (reason) => controller.error(reason);
      },
    }),
  );
  const headers = new Headers();
  if (total !== undefined) headers.set("content-length", String(total));
  if (type !== null) headers.set("content-type", type);
  const written = cache.put(url, new Response(guarded, { headers })).catch((error: unknown) => {
    fail(error);
    if (!abandoned) console.warn(`radixlm: could not keep the model in the Cache API (${String(error)}); it will be downloaded again next time.`);
  });
  const abandon = () => {
    abandoned = true;
    fail(new Error("the model load failed"));
  };
  return { abandon, written };
}

/** Reads a body chunk by chunk; stopping early cancels it and calls `onCancel` (to drop the cache copy). */
function fromStream(
  body: ReadableStream<Uint8Array>,
  url: string,
  total: number | undefined,
  fromNetwork: boolean,
  { onCancel = () => {}, forget }: { onCancel?: () => void; forget: () => Promise<void> },
): ModelBytes {
  const reader = body.getReader();
  let over = false;
  const cancel = () => {
    if (over) return;
    over = true;
    reader.cancel().catch(() => {});
    onCancel();
  };
  async function* chunks(): AsyncGenerator<Uint8Array> {
    try {
      for (;;) {
        let next: ReadableStreamReadResult<Uint8Array>;
        try {
          next = await reader.read();
        } catch (error) {
          throw new ModelFetchError(`Reading the model from ${url} broke off (${String(error)}). Check the network and load it again.`, { url });
        }
        if (next.done) {
          over = true;
          return;
        }
        yield next.value;
      }
    } finally {
      cancel();
    }
  }
  return { total, fromNetwork, chunks: chunks(), cancel, forget };
}
