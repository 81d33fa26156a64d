#!/usr/bin/env node
// prebuildify calls its builder as if it were node-gyp: `rebuild --target=V --arch=A
// --release`. This stands in for node-gyp and builds the addon with cmake-js, so that
// `prebuildify --napi --node-gyp scripts/prebuild-cmake.cjs` writes our prebuilds.
'use strict';
const path = require('node:path');
const { BuildSystem } = require('cmake-js');

const option = (name) => {
  const prefix = `--${name}=`;
  const arg = process.argv.find((a) => a.startsWith(prefix));
  return arg === undefined ? undefined : arg.slice(prefix.length);
};

const buildSystem = new BuildSystem({
  directory: path.resolve(__dirname, '..'),
  arch: option('arch') ?? process.arch,
  debug: process.argv.includes('--debug'),
});

buildSystem.rebuild().catch((error) => {
  console.error(error);
  process.exit(1);
});
