// Kafka Streams applications for every join kind, over two co-partitioned input topics (left,
// right) of String keys and values. tests/joins/test_vs_kafka_streams.py runs it, reads what each
// join wrote and checks it against the models in tests/joins (and, once streams_app has joins,
// against streams_app's answers over the same topics).
//
// Output topics, "<prefix><kind>", with key the join key and value "<left>+<right>" (each side the
// input record's value, or "null" where the join has no partner):
//   st-inner, st-left    left stream join/leftJoin table(right)
//   stv-inner, stv-left  the same against a versioned table(right) (KIP-914), with join grace (KIP-923),
//                        null keys filtered out first (Kafka Streams 4.3.1 fails on them there)
//   gt-inner, gt-left    left stream join/leftJoin globalTable(right), keyed by the reference in the
//                        left value ("L7>p1.k3" maps to "p1.k3"; none: null)
//   ss-inner, ss-left, ss-outer   left stream join right stream, JoinWindows before/after/grace
//   tt-inner, tt-left, tt-outer   table(left) join table(right); a result that disappears is a tombstone
//   fk-inner, fk-left    table(left) join table(right) on the foreign key in the left value (KIP-213)
// Tables write their changes, tombstones included, as records (toStream()).
//
// Arguments: bootstrap applicationId stateDir leftTopic rightTopic outputPrefix
//            beforeMs afterMs graceMs historyMs tableGraceMs
// One KafkaStreams instance per family (stream-table, versioned, global, stream-stream, tables),
// application id "<applicationId>-<family>", so that each has its own group and dropped-records
// count. Prints "RUNNING" once all run; on SIGTERM closes them and prints one line
// "DROPPED {"stream-table": n, ...}".

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.function.Function;

import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.ValueJoiner;
import org.apache.kafka.streams.state.Stores;

public final class JoinApps {

    private static final ValueJoiner<String, String, String> JOINER =
        (left, right) -> (left == null ? "null" : left) + "+" + (right == null ? "null" : right);

    /** The reference in a left value: "L7>p1.k3" refers to "p1.k3"; "L7" to nothing. */
    private static String ref(final String value) {
        if (value == null) {
            return null;
        }
        final int at = value.indexOf('>');
        return at < 0 ? null : value.substring(at + 1);
    }

    private static Consumed<String, String> strings() {
        return Consumed.with(Serdes.String(), Serdes.String());
    }

    private static Produced<String, String> out() {
        return Produced.with(Serdes.String(), Serdes.String());
    }

    public static void main(final String[] args) throws Exception {
        final String bootstrap = args[0];
        final String applicationId = args[1];
        final String stateDir = args[2];
        final String left = args[3];
        final String right = args[4];
        final String prefix = args[5];
        final Duration before = Duration.ofMillis(Long.parseLong(args[6]));
        final Duration after = Duration.ofMillis(Long.parseLong(args[7]));
        final Duration grace = Duration.ofMillis(Long.parseLong(args[8]));
        final Duration history = Duration.ofMillis(Long.parseLong(args[9]));
        final Duration tableGrace = Duration.ofMillis(Long.parseLong(args[10]));

        final Map<String, Function<StreamsBuilder, Void>> families = new LinkedHashMap<>();
        families.put("stream-table", builder -> {
            final KStream<String, String> stream = builder.stream(left, strings());
            final KTable<String, String> table = builder.table(right, strings());
            stream.join(table, JOINER).to(prefix + "st-inner", out());
            stream.leftJoin(table, JOINER).to(prefix + "st-left", out());
            return null;
        });
        families.put("versioned", builder -> {
            // Kafka Streams 4.3.1 fails on a null-key record here (its grace buffer requires a key:
            // NullPointerException "key cannot be null", and the client shuts down), so null keys
            // are filtered out before these two joins; docs/joins.md lists this difference.
            final KStream<String, String> stream = builder.stream(left, strings()).filter((key, value) -> key != null);
            final KTable<String, String> table = builder.table(right, strings(),
                Materialized.<String, String>as(Stores.persistentVersionedKeyValueStore("right-versioned", history))
                    .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()));
            final Joined<String, String, String> joined =
                Joined.with(Serdes.String(), Serdes.String(), Serdes.String()).withGracePeriod(tableGrace);
            stream.join(table, JOINER, joined.withName("stv-inner")).to(prefix + "stv-inner", out());
            stream.leftJoin(table, JOINER, joined.withName("stv-left")).to(prefix + "stv-left", out());
            return null;
        });
        families.put("global", builder -> {
            final KStream<String, String> stream = builder.stream(left, strings());
            final GlobalKTable<String, String> table = builder.globalTable(right, strings());
            stream.join(table, (key, value) -> ref(value), JOINER).to(prefix + "gt-inner", out());
            stream.leftJoin(table, (key, value) -> ref(value), JOINER).to(prefix + "gt-left", out());
            return null;
        });
        families.put("stream-stream", builder -> {
            final KStream<String, String> l = builder.stream(left, strings());
            final KStream<String, String> r = builder.stream(right, strings());
            final JoinWindows windows = JoinWindows.ofTimeDifferenceAndGrace(after, grace).before(before).after(after);
            final StreamJoined<String, String, String> joined =
                StreamJoined.with(Serdes.String(), Serdes.String(), Serdes.String());
            l.join(r, JOINER, windows, joined.withStoreName("ss-inner")).to(prefix + "ss-inner", out());
            l.leftJoin(r, JOINER, windows, joined.withStoreName("ss-left")).to(prefix + "ss-left", out());
            l.outerJoin(r, JOINER, windows, joined.withStoreName("ss-outer")).to(prefix + "ss-outer", out());
            return null;
        });
        families.put("tables", builder -> {
            final KTable<String, String> l = builder.table(left, strings());
            final KTable<String, String> r = builder.table(right, strings());
            l.join(r, JOINER).toStream().to(prefix + "tt-inner", out());
            l.leftJoin(r, JOINER).toStream().to(prefix + "tt-left", out());
            l.outerJoin(r, JOINER).toStream().to(prefix + "tt-outer", out());
            l.join(r, JoinApps::ref, JOINER).toStream().to(prefix + "fk-inner", out());
            l.leftJoin(r, JoinApps::ref, JOINER).toStream().to(prefix + "fk-left", out());
            return null;
        });

        final String[] names = families.keySet().toArray(new String[0]);
        final KafkaStreams[] apps = new KafkaStreams[names.length];
        final CountDownLatch running = new CountDownLatch(names.length);
        for (int i = 0; i < names.length; i++) {
            final StreamsBuilder builder = new StreamsBuilder();
            families.get(names[i]).apply(builder);
            final Properties props = new Properties();
            props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId + "-" + names[i]);
            props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir + "/" + names[i]);
            props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
            props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
            // Every table update goes downstream (no cache folding several into one).
            props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
            props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
            props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
            props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
            // Left/outer stream-stream joins look for due nulls at most once per second of wall
            // clock by default: 0 looks on every record, so what is emitted depends on the data.
            props.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX, 0L);
            final KafkaStreams streams = new KafkaStreams(builder.build(props), props);
            streams.setStateListener((now, previous) -> {
                if (now == KafkaStreams.State.RUNNING) {
                    running.countDown();
                }
            });
            apps[i] = streams;
        }
        final CountDownLatch done = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            final StringBuilder line = new StringBuilder("DROPPED {");
            for (int i = 0; i < names.length; i++) {
                long dropped = 0;
                for (final Map.Entry<MetricName, ? extends Metric> entry : apps[i].metrics().entrySet()) {
                    if (entry.getKey().name().equals("dropped-records-total")) {
                        dropped += ((Double) entry.getValue().metricValue()).longValue();
                    }
                }
                apps[i].close(Duration.ofSeconds(30));
                line.append(i == 0 ? "" : ",").append('"').append(names[i]).append("\":").append(dropped);
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
