import { defineConfig } from "vite";
import { VitePWA } from "vite-plugin-pwa";

// The app is served from the root of scripts/serve.mjs's origin (fixed port: the model cache,
// the spill tier and the conversations live in per-origin storage).
export default defineConfig({
  base: "/",
  // radixlm starts its engine as `new Worker(new URL("./worker.js", import.meta.url))`, which
  // the dependency pre-bundler would break: it is served as built.
  optimizeDeps: { exclude: ["radixlm"] },
  worker: { format: "es" },
  build: { outDir: "dist", emptyOutDir: true, target: "es2022", sourcemap: true },
  plugins: [
    // A service worker that keeps the built app (the engine's worker and wasm included), so the
    // page opens offline; the model itself is kept by the package in the Cache API. main.ts
    // registers it.
    VitePWA({
      injectRegister: false,
      registerType: "autoUpdate",
      manifest: {
        name: "radixlm chat",
        short_name: "radixlm",
        description: "A chat with a language model that runs on this device's GPU. Nothing leaves the device.",
        display: "standalone",
        background_color: "#ffffff",
        theme_color: "#2457c5",
        icons: [{ src: "/icon.svg", sizes: "any", type: "image/svg+xml", purpose: "any" }],
      },
      workbox: {
        globPatterns: ["**/*.{html,js,css,wasm,svg,webmanifest}"],
        // The engine's wasm is a few MiB.
        maximumFileSizeToCacheInBytes: 16 * 2 ** 20,
        // "/?model=…" is the app too.
        ignoreURLParametersMatching: [/.*/],
        cleanupOutdatedCaches: true,
        clientsClaim: true,
        skipWaiting: true,
      },
    }),
  ],
});
