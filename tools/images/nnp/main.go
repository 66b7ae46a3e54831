// Command nnp is the setuid-root helper of the nonewprivs test image: it
// prints the effective uid, which critest checks under no_new_privs.
package main

import (
	"fmt"
	"os"
)

func main() { fmt.Printf("Effective uid: %d\n", os.Geteuid()) }
