/** Largest HTTP response body (JSON) or single SSE event we accept from an upstream. */
export const MAX_HTTP_MESSAGE_BYTES = 16 * 1024 * 1024;

/**
 * Bounds what an HTTP upstream can make us buffer: a JSON response body as a whole, an event
 * stream per event (bytes since the last blank line). Past the bound the body errors, which fails
 * the request instead of growing the server's memory without limit.
 */
export function limitResponse(response: Response, maxBytes = MAX_HTTP_MESSAGE_BYTES): Response {
  if (!response.body) return response;
  const eventStream = (response.headers.get("content-type") ?? "").includes("text/event-stream");
  let count = 0;
  let lastByte = -1;
  const limiter = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      if (eventStream) {
        // An event ends at an empty line: "\n\n" (also across chunk boundaries).
        let end = -1;
        for (let i = chunk.length - 1; i >= 0; i--) {
          if (chunk[i] === 10 && ((i > 0 && chunk[i - 1] === 10) || (i === 0 && lastByte === 10))) {
            end = i;
            break;
          }
        }
        count = end >= 0 ? chunk.length - end - 1 : count + chunk.length;
        if (chunk.length > 0) lastByte = chunk[chunk.length - 1]!;
      } else count += chunk.length;
      if (count > maxBytes) {
        controller.error(new Error(`the upstream sent a message over ${maxBytes} bytes`));
        return;
      }
      controller.enqueue(chunk);
    },
  });
  return new Response(response.body.pipeThrough(limiter), {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}
