package main

import (
	"math"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestMedianFigure_TakesEachFigureOnItsOwn(t *testing.T) {
	runs := []figure{
		{rate: 100, p50: 1, p99: 30, hasLat: true},
		{rate: 300, p50: 3, p99: 10, hasLat: true},
		{rate: 200, p50: 2, p99: 20, hasLat: true},
	}
	got := medianFigure(runs)
	if got.rate != 200 || got.p50 != 2 || got.p99 != 20 || !got.hasLat {
		t.Errorf("medianFigure = %+v, want rate 200, p50 2, p99 20", got)
	}
	if runs[0].rate != 100 || runs[1].rate != 300 {
		t.Errorf("medianFigure reordered the runs: %+v", runs)
	}
	// A run whose tool printed no latency counts for the rate only.
	runs = append(runs[:2], figure{rate: 250})
	if got := medianFigure(runs); got.rate != 250 || got.p50 != 2 || got.p99 != 20 || !got.hasLat {
		t.Errorf("with a run without latency: %+v, want rate 250, p50 2, p99 20", got)
	}
	if got := medianFigure([]figure{{rate: 5}}); got.hasLat {
		t.Errorf("no run with latency, yet %+v has one", got)
	}
}

func TestRatioCell(t *testing.T) {
	if got := ratioCell([]float64{1.234}); got != "1.23" {
		t.Errorf("one round: %q", got)
	}
	if got, want := ratioCell([]float64{1.5, 1.2, 1.4}), "1.40 (1.20–1.50)"; got != want {
		t.Errorf("three rounds: %q, want %q", got, want)
	}
}

func TestFigureLatency(t *testing.T) {
	for _, c := range []struct {
		f    figure
		want string
	}{
		{figure{rate: 1}, "—"},
		{figure{p50: 1.5, p99: 9.25, hasLat: true}, "1.50 / 9.25"},
		{figure{p50: 1.5, p99: 9.25, hasLat: true, e2e: true}, "1.50 / 9.25 (e2e)"},
	} {
		if got := c.f.latency(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.f, got, c.want)
		}
	}
}

func TestCombinedRate(t *testing.T) {
	// 1,000 messages at 10/s and 1,000 at 40/s: 2,000 in 125 s.
	if got := combinedRate(10, 40); got != 16 {
		t.Fatalf("combinedRate(10, 40) = %v, want 16", got)
	}
}

func TestCPUSeconds_AgreesWithGetrusage(t *testing.T) {
	// Spin until this process has used 300 ms of CPU, then read both; a
	// parse of the wrong fields of /proc/<pid>/stat would not agree.
	var ru syscall.Rusage
	used := func() float64 {
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	for deadline := time.Now().Add(5 * time.Second); used() < 0.3 && time.Now().Before(deadline); {
	}
	got, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if want := used(); math.Abs(got-want) > 0.05 {
		t.Fatalf("cpuSeconds = %.2f s, getrusage says %.2f s", got, want)
	}
}
