// The API page is server-rendered from the OpenAPI schema; this only shows the readiness banner.
import { start } from "./common.js";

start(async () => {});
