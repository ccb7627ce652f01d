// Command helper is the child that the Process tests run: it says it is ready, optionally
// starts a grandchild (to prove that no descendant outlives its test), ticks, and exits 0 on
// SIGTERM.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	fmt.Printf("ready %d\n", os.Getpid())
	fmt.Printf("greeting %s\n", os.Getenv("HELPER_GREETING"))
	if len(os.Args) > 1 && os.Args[1] == "spawn" {
		gc := exec.Command("sleep", "300")
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "spawn:", err)
			os.Exit(2)
		}
		fmt.Printf("grandchild %d\n", gc.Process.Pid)
	}
	fmt.Fprintln(os.Stderr, "stderr too")
	tick := time.NewTicker(20 * time.Millisecond)
	for i := 0; ; i++ {
		select {
		case <-tick.C:
			fmt.Printf("tick %d\n", i)
		case <-term:
			fmt.Println("term")
			os.Exit(0)
		}
	}
}
