package hwq

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestConcurrentDoorbell moves 1e6 entries from a producer goroutine to a
// consumer goroutine through one region, with the consumer sleeping at once
// whenever the ring is empty (Spin 0) and the producer pausing now and then
// so that it does. A lost wake-up would show as a Wait that sleeps out its
// MaxSleep: MaxSleep is set far beyond the test's deadline, so every sleep
// must end by a Publish's futex wake.
func TestConcurrentDoorbell(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	const size, count = 32, 128
	r := newTestRing(t, size, count)
	rng, _ := seeded(t)
	p, c := ends(t, r, WaitOptions{MaxSleep: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	pauses := make([]int, 1024) // batch sizes; 0 = pause before the batch
	for i := range pauses {
		if rng.IntN(16) == 0 {
			pauses[i] = 0
		} else {
			pauses[i] = 1 + rng.IntN(count)
		}
	}
	prodErr := make(chan error, 1)
	go func() {
		defer close(prodErr)
		for i, b := 0, 0; i < n; b++ {
			k := pauses[b%len(pauses)]
			if k == 0 {
				time.Sleep(20 * time.Microsecond) // let the consumer fall asleep
				continue
			}
			got, err := p.Reserve(min(k, n-i))
			if err != nil && got == 0 {
				if ctx.Err() != nil {
					prodErr <- ctx.Err()
					return
				}
				runtime.Gosched() // full: the consumer is draining
				continue
			}
			for j := range got {
				fillEntry(p.Entry(j), uint64(i+j))
			}
			i += p.Publish()
		}
	}()

	buf := make([]byte, size)
	for i := 0; i < n; {
		a, err := c.Wait(ctx)
		if err != nil {
			t.Fatalf("Wait at entry %d of %d: %v (a lost wake-up?)", i, n, err)
		}
		for j := range a {
			c.CopyOut(j, buf)
			if _, err := checkEntry(buf, uint64(i+j)); err != nil {
				t.Fatal(err)
			}
		}
		c.Release(a)
		i += a
	}
	if err := <-prodErr; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries; the consumer slept %d times", n, c.sleeps)
	if c.sleeps < 10 {
		t.Fatalf("the consumer slept only %d times: the doorbell path was not exercised", c.sleeps)
	}
}

// TestWaitDeadline: Wait on an empty ring returns the context's error at
// its deadline, and clears the sleeping word.
func TestWaitDeadline(t *testing.T) {
	r := newTestRing(t, 8, 4)
	for _, spin := range []time.Duration{0, time.Millisecond} {
		_, c := ends(t, r, WaitOptions{Spin: spin, MaxSleep: time.Hour})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		start := time.Now()
		n, err := c.Wait(ctx)
		cancel()
		if n != 0 || err != context.DeadlineExceeded {
			t.Fatalf("spin %v: Wait = %d, %v", spin, n, err)
		}
		if el := time.Since(start); el < 25*time.Millisecond || el > 5*time.Second {
			t.Fatalf("spin %v: Wait took %v for a 30ms deadline", spin, el)
		}
		if r.sleeping().Load() != 0 {
			t.Fatal("sleeping word left set")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, c := ends(t, r, WaitOptions{})
	if _, err := c.Wait(ctx); err != context.Canceled {
		t.Fatalf("Wait on a cancelled context: %v", err)
	}
}

// TestPublishWakes: a Publish while the consumer sleeps wakes it long
// before MaxSleep, and clears the sleeping word itself.
func TestPublishWakes(t *testing.T) {
	r := newTestRing(t, 8, 4)
	p, c := ends(t, r, WaitOptions{MaxSleep: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := c.Wait(ctx)
		got <- err
	}()
	for r.sleeping().Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond) // most likely in futex_wait by now
	start := time.Now()
	if err := p.Push([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("woken after %v", el)
	}
}
