#!/usr/bin/env node
// `fleet-agent` as linked into node_modules/.bin by npm: this checkout's built CLI (npm ci builds it).
import '../dist/cli.js';
