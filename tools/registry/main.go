// The registry the tests push charts and images to: distribution's own `registry` command,
// built with the storage drivers a local test needs (filesystem, inmemory) and htpasswd
// authentication, without the cloud storage drivers and their SDKs, which only cost build
// time here.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
