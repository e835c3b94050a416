# plots.gp: the plots of `make bench` (bench/run.lua writes the data and
# runs this in build/bench with -e "plain=0|1"). SVG, no display needed.
if (!exists("plain")) plain = 0
set terminal svg size 720,420 dynamic font "sans,12" background "white"
set termoption noenhanced
set grid
set key bottom right

# Handoff latency: from the releaser's release() to a waiting process
# returning from acquire(), N = 4 processes stepping back 1 ms.
set output "handoff.svg"
set title "Handoff latency, N = 4 processes (1 ms step-back), all runs"
set xlabel "handoff latency (ms, log scale)"
set ylabel "fraction of handoffs at or below"
set logscale x
set yrange [0:1]
if (plain) {
  plot "handoff-dlock.dat" using 1:2 with lines lw 2 title "dlock lock", \
       "handoff-fair.dat" using 1:2 with lines lw 2 title "dlock fair_lock", \
       "handoff-plain.dat" using 1:2 with lines lw 2 dt 2 title "hand-written Lua lock (SET NX + sleep)"
} else {
  plot "handoff-dlock.dat" using 1:2 with lines lw 2 title "dlock lock", \
       "handoff-fair.dat" using 1:2 with lines lw 2 title "dlock fair_lock"
}
unset logscale x

# Fairness by N: Jain's index over the processes' critical sections, and
# the longest wait of any acquire that found the lock held (looping).
set output "fairness.svg"
set terminal svg size 960,420 dynamic font "sans,12" background "white"
set termoption noenhanced
set multiplot layout 1,2 title "Default lock and fair_lock by number of processes on one lock (N)"
set title "Jain's index (1 = every process got the same share)"
set xlabel "N"
set ylabel "Jain's index"
set yrange [0:1.05]
set xtics (2, 4, 8)
set key bottom left
plot "fairness.dat" using 1:2 with linespoints lw 2 pt 7 title "lock, looping", \
     "fairness.dat" using 1:3 with linespoints lw 2 pt 5 title "fair_lock, looping", \
     "fairness.dat" using 1:4 with linespoints lw 2 pt 6 dt 2 title "lock, 1 ms step-back", \
     "fairness.dat" using 1:5 with linespoints lw 2 pt 4 dt 2 title "fair_lock, 1 ms step-back"
set title "Longest wait behind a held lock, looping (ms)"
set ylabel "ms"
set yrange [0:*]
set key top left
plot "fairness.dat" using 1:6 with linespoints lw 2 pt 7 title "lock", \
     "fairness.dat" using 1:7 with linespoints lw 2 pt 5 title "fair_lock"
unset multiplot
