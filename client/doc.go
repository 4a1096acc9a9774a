// Package client is trainq's Go SDK: what the CLI (cmd/trainq/), the REST API
// (api/) and the tests call to submit, inspect and stop jobs. It talks to
// Temporal only (dial, start, query, cancel, visibility), never runs
// workflow or activity code, and validates at the edge, so a rejected
// request starts nothing.
//
// A *Client holds the Temporal connection, the configuration and the
// LogSource that reads workers' logs; Jobs is the interface the REST API
// takes, so its tests can put a fake in its place.
package client
