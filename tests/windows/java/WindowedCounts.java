// A Kafka Streams application counting the records of one input topic per key in tumbling,
// hopping, sliding and session windows, with grace, emitting each window's final count once
// when it closes (suppress(untilWindowCloses), KIP-328; not EmitStrategy.onWindowClose, which
// in Kafka Streams 4.3 can leave windows out: see docs/windows.md). tests/windows/test_vs_kafka_streams.py
// runs it next to the equivalent streams_app topology over the same input topic and compares the
// final results. Output records: key "<key>@<start>@<end>", value the count as a decimal string.
//
// Arguments: bootstrap applicationId stateDir inputTopic outputPrefix
//            tumblingMs hoppingSizeMs hoppingStepMs slidingMs sessionGapMs graceMs
// Each kind of window runs as its own KafkaStreams instance (application id "<id>-<kind>"), so
// that its dropped-records metric is its own. Prints "RUNNING" once all four run; on SIGTERM,
// closes them and prints one line "DROPPED {"tumbling": n, ...}" (dropped-records-total: per
// record, or per window for a record late for some of its windows, as Kafka Streams counts).

import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;

import static org.apache.kafka.streams.kstream.Suppressed.BufferConfig.unbounded;
import static org.apache.kafka.streams.kstream.Suppressed.untilWindowCloses;

public final class WindowedCounts {

    private static void emit(final KTable<Windowed<String>, Long> counts, final String topic) {
        counts.toStream()
            .filter((key, count) -> count != null)
            .map((key, count) -> KeyValue.pair(
                key.key() + "@" + key.window().start() + "@" + key.window().end(),
                Long.toString(count)))
            .to(topic, Produced.with(Serdes.String(), Serdes.String()));
    }

    public static void main(final String[] args) throws Exception {
        final String bootstrap = args[0];
        final String applicationId = args[1];
        final String stateDir = args[2];
        final String input = args[3];
        final String prefix = args[4];
        final Duration tumbling = Duration.ofMillis(Long.parseLong(args[5]));
        final Duration hoppingSize = Duration.ofMillis(Long.parseLong(args[6]));
        final Duration hoppingStep = Duration.ofMillis(Long.parseLong(args[7]));
        final Duration sliding = Duration.ofMillis(Long.parseLong(args[8]));
        final Duration sessionGap = Duration.ofMillis(Long.parseLong(args[9]));
        final Duration grace = Duration.ofMillis(Long.parseLong(args[10]));

        final String[] kinds = {"tumbling", "hopping", "sliding", "session"};
        final KafkaStreams[] apps = new KafkaStreams[kinds.length];
        final CountDownLatch running = new CountDownLatch(kinds.length);
        for (int i = 0; i < kinds.length; i++) {
            final String kind = kinds[i];
            final StreamsBuilder builder = new StreamsBuilder();
            final KGroupedStream<String, String> grouped = builder
                .stream(input, Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey();
            final KTable<Windowed<String>, Long> counts;
            if (kind.equals("tumbling")) {
                counts = grouped.windowedBy(TimeWindows.ofSizeAndGrace(tumbling, grace))
                    .count().suppress(untilWindowCloses(unbounded()));
            } else if (kind.equals("hopping")) {
                counts = grouped.windowedBy(TimeWindows.ofSizeAndGrace(hoppingSize, grace).advanceBy(hoppingStep))
                    .count().suppress(untilWindowCloses(unbounded()));
            } else if (kind.equals("sliding")) {
                counts = grouped.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(sliding, grace))
                    .count().suppress(untilWindowCloses(unbounded()));
            } else {
                counts = grouped.windowedBy(SessionWindows.ofInactivityGapAndGrace(sessionGap, grace))
                    .count().suppress(untilWindowCloses(unbounded()));
            }
            emit(counts, prefix + kind);

            final Properties props = new Properties();
            props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId + "-" + kind);
            props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir + "/" + kind);
            props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
            props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
            props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
            props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
            props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
            props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
            final KafkaStreams streams = new KafkaStreams(builder.build(), props);
            streams.setStateListener((now, before) -> {
                if (now == KafkaStreams.State.RUNNING) {
                    running.countDown();
                }
            });
            apps[i] = streams;
        }
        final CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            final StringBuilder line = new StringBuilder("DROPPED {");
            for (int i = 0; i < kinds.length; i++) {
                long dropped = 0;
                for (final Map.Entry<MetricName, ? extends Metric> entry : apps[i].metrics().entrySet()) {
                    if (entry.getKey().name().equals("dropped-records-total")) {
                        dropped += ((Double) entry.getValue().metricValue()).longValue();
                    }
                }
                apps[i].close(Duration.ofSeconds(30));
                line.append(i == 0 ? "" : ",").append('"').append(kinds[i]).append("\":").append(dropped);
            }
            System.out.println(line.append('}'));
            System.out.flush();
            done.countDown();
        }));
        for (final KafkaStreams streams : apps) {
            streams.start();
        }
        running.await();
        System.out.println("RUNNING");
        System.out.flush();
        done.await();
    }
}
