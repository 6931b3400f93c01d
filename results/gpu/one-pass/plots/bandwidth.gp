set terminal pngcairo size 2170,560 font 'sans,10'
set output 'plots/bandwidth.png'
set title 'Aggregate bandwidth per engine vs the measured pull-path link (hatched)'
set ylabel 'GB/s received by all inference ranks (log scale)'
set style data histograms
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key outside right top
set xtics rotate by -25 left noenhanced
set datafile missing '-'
set logscale y
plot 'plots/bandwidth.dat' using 2:xtic(1) title 'broadcast', '' using 3 title 'v1', '' using 4 title 'v2', '' using 5 title 'v3', '' using 6 title 'v4', '' using 7 title 'peer:bucketed-ipc', '' using 8 title 'peer:ipc-per-tensor', '' using 9 title 'link limit' lc rgb 'black' fs pattern 4
