package api

import (
	_ "embed"
	"net/http"
)

// openapiJSON is the API's OpenAPI 3.1 document, written by hand;
// TestOpenAPIMatchesRoutes keeps its paths in step with the routes.
//
//go:embed openapi.json
var openapiJSON []byte

func (s *Server) openapi(w http.ResponseWriter, r *http.Request, _ Principal) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiJSON)
}
