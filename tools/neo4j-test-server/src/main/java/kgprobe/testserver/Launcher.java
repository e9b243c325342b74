package kgprobe.testserver;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.ConnectorPortRegister;
import org.neo4j.configuration.connectors.ConnectorType;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.connectors.HttpsConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.internal.helpers.HostnamePort;
import org.neo4j.kernel.internal.GraphDatabaseAPI;

/**
 * Neo4j 5 Community, embedded, with its Bolt server on 127.0.0.1 and authentication ON: a real
 * server for kgprobe's test suite, started by tests/neo4j_server.py.
 *
 * <pre>
 * java -cp ... kgprobe.testserver.Launcher HOME READY_FILE [CONFIG_FILE]
 * </pre>
 *
 * <ul>
 *   <li>The first line of standard input is the password the user {@code neo4j} gets (so it is in
 *       no process's arguments or environment); the server stops when standard input closes, or on
 *       SIGTERM.
 *   <li>CONFIG_FILE (optional): a neo4j.conf-style file of {@code name=value} settings, loaded by
 *       Neo4j itself under strict validation (an unknown or malformed setting stops the start).
 *   <li>When Bolt accepts connections, READY_FILE is written (atomically) with one line: the Bolt
 *       URI. On a failure to start the process exits with status 1 and the reason on stderr.
 * </ul>
 */
public final class Launcher {
    private Launcher() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 2 || args.length > 3) {
            System.err.println("usage: Launcher HOME READY_FILE [CONFIG_FILE]  (password on stdin)");
            System.exit(2);
        }
        Path home = Path.of(args[0]);
        Path ready = Path.of(args[1]);
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String password = stdin.readLine();
        if (password == null || password.isEmpty()) {
            System.err.println("no password on standard input");
            System.exit(2);
        }

        DatabaseManagementService dbms;
        try {
            DatabaseManagementServiceBuilder builder = new DatabaseManagementServiceBuilder(home);
            if (args.length == 3) {
                builder.loadPropertiesFromFile(Path.of(args[2]));
            }
            dbms = builder
                    .setConfig(GraphDatabaseSettings.strict_config_validation, true)
                    .setConfig(GraphDatabaseSettings.auth_enabled, true)
                    .setConfig(BoltConnector.enabled, true)
                    .setConfig(BoltConnector.listen_address, new SocketAddress("127.0.0.1", 0))
                    .setConfig(BoltConnector.advertised_address, new SocketAddress("127.0.0.1", 0))
                    .setConfig(HttpConnector.enabled, false)
                    .setConfig(HttpsConnector.enabled, false)
                    .build();
        } catch (RuntimeException e) {
            System.err.println("neo4j did not start: " + e);
            System.exit(1);
            return;
        }
        AtomicBoolean stopped = new AtomicBoolean(false);
        Runnable stop = () -> {
            if (stopped.compareAndSet(false, true)) {
                dbms.shutdown();
            }
        };
        Runtime.getRuntime().addShutdownHook(new Thread(stop, "neo4j-test-server-stop"));

        // The initial password of `neo4j`, set in-process on the system database: a parameter,
        // never part of a query text or a log line.
        dbms.database(GraphDatabaseSettings.SYSTEM_DATABASE_NAME).executeTransactionally(
                "ALTER USER neo4j SET PASSWORD $password CHANGE NOT REQUIRED", Map.of("password", password));
        password = null;

        GraphDatabaseAPI db = (GraphDatabaseAPI) dbms.database(GraphDatabaseSettings.DEFAULT_DATABASE_NAME);
        HostnamePort bolt = db.getDependencyResolver()
                .resolveDependency(ConnectorPortRegister.class)
                .getLocalAddress(ConnectorType.BOLT);
        Path tmp = ready.resolveSibling(ready.getFileName() + ".tmp");
        String uri = "bolt://" + bolt.getHost() + ":" + bolt.getPort();
        Files.writeString(tmp, uri + "\n", StandardCharsets.UTF_8);
        Files.move(tmp, ready, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        System.out.println("neo4j test server ready: " + uri);
        System.out.flush();

        // Block until standard input closes (the parent went away or asked us to stop).
        try {
            while (stdin.readLine() != null) {
                // ignore anything sent
            }
        } catch (IOException ignored) {
            // closed under us: stop as well
        }
        stop.run();
        System.exit(0);
    }
}
