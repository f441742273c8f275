import { defineConfig } from "vite";

// The app is served from the root of scripts/serve.mjs's origin (fixed port: the model cache,
// the spill tier and the conversations live in per-origin storage).
export default defineConfig({
  base: "/",
  // radixlm starts its engine as `new Worker(new URL("./worker.js", import.meta.url))`, which
  // the dependency pre-bundler would break: it is served as built.
  optimizeDeps: { exclude: ["radixlm"] },
  worker: { format: "es" },
  build: { outDir: "dist", emptyOutDir: true, target: "es2022", sourcemap: true },
});
