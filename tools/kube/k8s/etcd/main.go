// etcd's own server command. go.etcd.io/etcd/server/v3 carries replace lines that make
// `go install` refuse it, so this main calls the same entry point its etcd binary does.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
