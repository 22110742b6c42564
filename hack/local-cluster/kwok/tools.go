//go:build tools

// Package tools keeps kwok's command in this build module's requirements (go mod tidy).
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
