import { z } from "zod";
import { SESSION_ID_PATTERN } from "../sessions/ids.ts";

/** The 8-character agent session handle every session-bound tool takes. */
export const SessionId = z
  .string()
  .length(8)
  .regex(SESSION_ID_PATTERN, "must be the 8-character id returned by session_start");
