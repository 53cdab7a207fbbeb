// Package admin is Ferry's operator API: JSON under /api/v1/ on the HTTP
// listener, the same from any instance. It reads what every instance
// already holds of the cluster (the instances' heartbeats, the sessions and
// retained tables in Kafka) and asks the owning instance, through Kafka, to
// act where an action needs it; a Backend (package admin/backend) does
// both. This package is the HTTP side: the routes, the bearer token
// (constant-time comparison; off without a token), pagination, JSON
// errors, the action log and counters, and the OpenAPI document
// (openapi.json, served at /api/v1/openapi.json and kept in docs/) that a
// test checks against the routes.
//
// The read endpoints never show a payload or a password.
package admin
